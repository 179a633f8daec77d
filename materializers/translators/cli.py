"""`bottler translate NAME` (registered by bottler/cli.py)."""

from __future__ import annotations

import signal
import threading

import typer
from confluent_kafka import KafkaException

from bottler.errors import BottlerError


def translate(
    name: str = typer.Argument(..., help="An installed translator (entry point of the "
                               "bottler.translators group) or module:attribute.",
                               show_default=False),
    broker: str = typer.Option("localhost:9092", "--broker", "-b", envvar="BOTTLER_KAFKA",
                               help="Kafka bootstrap servers [env: BOTTLER_KAFKA]"),
    schema_registry: str = typer.Option(
        "http://localhost:8081", "--schema-registry", "-r", envvar="BOTTLER_REGISTRY",
        help="Schema registry URL [env: BOTTLER_REGISTRY]"),
    topic_prefix: str = typer.Option("", "--topic-prefix", "-p", envvar="BOTTLER_TOPIC_PREFIX",
                                     help="The capture's --topic-prefix."),
    output_prefix: str | None = typer.Option(
        None, "--output-prefix", help="Prefix of the output topics [default: --topic-prefix]"),
    group_id: str | None = typer.Option(
        None, "--group-id", "-g",
        help="Consumer group and transactional id [default: bottler-translate-NAME, "
        "under the topic prefix]"),
    on_poison: str = typer.Option("dead-letter", "--on-poison",
                                  help="dead-letter (default) or stop: what an input that "
                                  "cannot be decoded or translated does"),
    batch_size: int = typer.Option(500, "--batch-size",
                                   help="Input messages per transaction (at most)."),
    once: bool = typer.Option(False, "--once", help="Stop once caught up."),
    metrics_port: int | None = typer.Option(None, "--metrics-port",
                                            help="Serve Prometheus metrics on this port."),
) -> None:
    """Translate captured table changes into business events, exactly once."""
    from materializers.translators.loading import load
    from materializers.translators.runner import TranslatorRunner

    if on_poison not in ("dead-letter", "stop"):
        raise BottlerError(f"--on-poison must be dead-letter or stop, not {on_poison!r}")
    translator = load(name)
    if metrics_port:  # first: it tells the stack we are up, while we wait for the topics
        from prometheus_client import start_http_server

        start_http_server(metrics_port)
    runner = TranslatorRunner(
        translator, bootstrap=broker, registry=schema_registry, topic_prefix=topic_prefix,
        output_prefix=output_prefix, group_id=group_id, on_poison=on_poison,  # type: ignore[arg-type]
        batch_size=batch_size,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        if once:
            runner.run_until_caught_up()
        else:
            runner.run(stop)
    except KafkaException as exc:
        raise BottlerError(f"Kafka failed: {exc.args[0].str()}",
                           "check the broker (--broker); a restart resumes from the last "
                           "committed batch") from None
