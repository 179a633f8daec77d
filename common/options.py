"""The command-line options the materializers share (`bottler materialize postgres|search|
warehouse`, `bottler reindex`, `bottler translate`), each written once so that a flag reads the
same environment variable, has the same default and says the same thing in every command.

Constants are typer defaults to use as they are; the functions make the options whose default or
help legitimately differ between commands. `serve_metrics` is what the commands do with one of
them; --on-poison is checked by the core (materializers.core.poison.checked)."""

from __future__ import annotations

import typer

from common.kafka import prefix_problem

Broker = typer.Option("localhost:9092", "--broker", "-b", envvar="BOTTLER_KAFKA",
                      help="Kafka bootstrap servers [env: BOTTLER_KAFKA]")
SchemaRegistry = typer.Option("http://localhost:8081", "--schema-registry", "-r",
                              envvar="BOTTLER_REGISTRY",
                              help="Schema registry URL [env: BOTTLER_REGISTRY]")
def _topic_prefix(value: str) -> str:
    if problem := prefix_problem(value):
        raise typer.BadParameter(f"{problem}, got {value!r}")
    return value


TopicPrefix = typer.Option("", "--topic-prefix", "-p", envvar="BOTTLER_TOPIC_PREFIX",
                           callback=_topic_prefix, help="The capture's --topic-prefix.")
MetricsPort = typer.Option(None, "--metrics-port", help="Serve Prometheus metrics on this port.")
# Loopback unless asked: metrics name tables and hosts, and nobody off the machine needs them
# (a container, scraped over its network, passes 0.0.0.0).
METRICS_HOST = "127.0.0.1"
MetricsHost = typer.Option(METRICS_HOST, "--metrics-host", envvar="BOTTLER_METRICS_HOST",
                           help="Address the metrics are served on (0.0.0.0: every interface) "
                           "[env: BOTTLER_METRICS_HOST]")


def _topics(verb: str):
    return typer.Option(None, "--topic", "--topics",
                        help=f"Table topic to {verb} (repeatable) "
                        "[default: every topic under the prefix]")


# constants, not calls in the signatures: a list default is what bugbear (B008) objects to
Topics = _topics("read")
TopicsToIndex = _topics("index")


def group_id(default: str | None, help: str):
    return typer.Option(default, "--group-id", "-g", help=help)


def on_poison(detail: str = ""):
    """`--on-poison`; `detail` says what counts as poison for the command, when it is worth it."""
    return typer.Option("dead-letter", "--on-poison",
                        help="dead-letter (default) or stop" + (f": {detail}" if detail else ""))


def batch_size(default: int = 5000, help: str = "Messages per batch."):
    return typer.Option(default, "--batch-size", help=help)


def join_group():
    return typer.Option(
        False, "--join-group", envvar="BOTTLER_JOIN_GROUP",
        help="Share the table topics' partitions with the other instances of this view in its "
        "consumer group: start several, and a rebalance moves partitions as they come and go "
        "[env: BOTTLER_JOIN_GROUP]")


def instance_id():
    return typer.Option(
        None, "--instance-id", envvar="BOTTLER_INSTANCE_ID",
        help="With --join-group: this instance's stable name in the group (static membership:"
        " restarted under the same name, it takes its partitions back without a rebalance) "
        "[env: BOTTLER_INSTANCE_ID]", show_default=False)


def once(help: str = "Stop once caught up."):
    return typer.Option(False, "--once", help=help)


def serve_metrics(port: int | None, host: str = METRICS_HOST) -> None:
    """Serve the process's Prometheus metrics on --metrics-host:--metrics-port, if a port was
    given."""
    if port:
        from prometheus_client import start_http_server

        start_http_server(port, addr=host)
