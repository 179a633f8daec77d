"""The command-line options the commands share, each written once so that a flag has the same
name, setting and help in every command, and the settings classes behind them (common/config.py
reads them: flags > BOTTLER_* environment > YAML file > defaults).

Every option's default is None ("not given"): the setting's default lives in its settings class,
and the help says it and names the variable. Constants are typer defaults to use as they are; the
functions make the options whose default or help legitimately differ between commands.
--on-poison is checked by the settings and by the core (materializers.core.poison.checked)."""

from __future__ import annotations

from typing import Literal

import typer

from common.config import KafkaSettings, RegistrySettings, TopicPrefixSettings


def option(*names: str, help: str, default: object = None, **kwargs):
    """An option that is a setting: no typer default, so the environment and the file count."""
    return typer.Option(default, *names, help=help, show_default=False, **kwargs)


Config = option("--config", help="YAML file of settings; its keys are the settings' names "
                "[env: BOTTLER_CONFIG]")
Broker = option("--broker", "-b", help="Kafka bootstrap servers [default: localhost:9092] "
                "[env: BOTTLER_KAFKA]")
KafkaConfig = option("--kafka-config", "-C", metavar="PROP=VALUE",
                     help="Kafka client property (librdkafka's, e.g. security.protocol=SASL_SSL), "
                     "repeatable; secrets belong in BOTTLER_KAFKA_CONFIG or the file's `kafka:`")
SchemaRegistry = option("--schema-registry", "-r", help="Schema registry URL "
                        "[default: http://localhost:8081] [env: BOTTLER_REGISTRY]")
RegistryConfig = option("--registry-config", "-R", metavar="PROP=VALUE",
                        help="Schema registry client property (e.g. ssl.ca.location=FILE), "
                        "repeatable; basic.auth.user.info belongs in BOTTLER_REGISTRY_CONFIG or "
                        "the file's `schema_registry:`")
TopicPrefix = option("--topic-prefix", "-p", help="The capture's --topic-prefix "
                     "[env: BOTTLER_TOPIC_PREFIX]")
MetricsPort = option("--metrics-port", help="Serve Prometheus metrics on this port "
                     "[env: BOTTLER_METRICS_PORT]")
METRICS_HOST = "127.0.0.1"
MetricsHost = option("--metrics-host", help="Address the metrics are served on (0.0.0.0: every "
                     "interface) [default: 127.0.0.1] [env: BOTTLER_METRICS_HOST]")


def _topics(verb: str):
    return option("--topic", "--topics",
                  help=f"Table topic to {verb} (repeatable) [default: the table topics the "
                  "capture of the prefix owns]")


# constants, not calls in the signatures: a list default is what bugbear (B008) objects to
Topics = _topics("read")
TopicsToIndex = _topics("index")


def group_id(default: str, help: str):
    return option("--group-id", "-g", help=f"{help} [default: {default}]")


def on_poison(detail: str = ""):
    """`--on-poison`; `detail` says what counts as poison for the command, when it is worth it."""
    return option("--on-poison",
                  help="dead-letter (default) or stop" + (f": {detail}" if detail else ""))


def batch_size(default: int = 5000, help: str = "Messages per batch."):
    return option("--batch-size", help=f"{help} [default: {default}]")


def join_group():
    return option(
        "--join-group", default=False,
        help="Share the table topics' partitions with the other instances of this view in its "
        "consumer group: start several, and a rebalance moves partitions as they come and go "
        "[env: BOTTLER_JOIN_GROUP]")


def instance_id():
    return option(
        "--instance-id",
        help="With --join-group: this instance's stable name in the group (static membership:"
        " restarted under the same name, it takes its partitions back without a rebalance) "
        "[env: BOTTLER_INSTANCE_ID]")


def once(help: str = "Stop once caught up."):
    return option("--once", help=help, default=False)


class ViewSettings(KafkaSettings, RegistrySettings, TopicPrefixSettings):
    """What every materializer reads its topics with (`materialize *`, `reindex`, `translate`);
    each command adds its own settings (topics, batch_size, once, metrics...)."""

    on_poison: Literal["dead-letter", "stop"] = "dead-letter"


def serve_metrics(port: int | None, host: str = METRICS_HOST) -> None:
    """Serve the process's Prometheus metrics on --metrics-host:--metrics-port, if a port was
    given."""
    if port:
        from prometheus_client import start_http_server

        start_http_server(port, addr=host)
