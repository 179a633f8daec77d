"""`bottler materialize postgres`: the target-Postgres replica (registered by bottler/cli.py)."""

from __future__ import annotations

import signal
import threading

import typer

from bottler import gctune
from bottler.errors import BottlerError


def materialize_postgres(
    target: str = typer.Option(..., "--target", "-t", envvar="BOTTLER_TARGET_DSN",
                               help="Target database DSN [env: BOTTLER_TARGET_DSN]",
                               show_default=False),
    broker: str = typer.Option("localhost:9092", "--broker", "-b", envvar="BOTTLER_KAFKA",
                               help="Kafka bootstrap servers [env: BOTTLER_KAFKA]"),
    schema_registry: str = typer.Option(
        "http://localhost:8081", "--schema-registry", "-r", envvar="BOTTLER_REGISTRY",
        help="Schema registry URL [env: BOTTLER_REGISTRY]"),
    topic_prefix: str = typer.Option("", "--topic-prefix", "-p", envvar="BOTTLER_TOPIC_PREFIX",
                                     help="The capture's --topic-prefix."),
    topics: list[str] | None = typer.Option(None, "--topic",
                                            help="Table topic to read (repeatable) "
                                            "[default: every topic under the prefix]"),
    group_id: str = typer.Option("bottler-postgres", "--group-id", "-g",
                                 help="Consumer group; also the key of the stored offsets."),
    on_poison: str = typer.Option("dead-letter", "--on-poison",
                                  help="dead-letter (default) or stop"),
    batch_size: int = typer.Option(5000, "--batch-size", help="Messages per batch."),
    once: bool = typer.Option(False, "--once", help="Stop once caught up."),
    metrics_port: int | None = typer.Option(None, "--metrics-port",
                                            help="Serve Prometheus metrics on this port."),
) -> None:
    """Keep a replica of the captured tables in the target database (no foreign keys)."""
    from materializers.core import Materializer
    from materializers.postgres.sink import PostgresSink

    if on_poison not in ("dead-letter", "stop"):
        raise BottlerError(f"--on-poison must be dead-letter or stop, not {on_poison!r}")
    if metrics_port:
        from prometheus_client import start_http_server

        start_http_server(metrics_port)
    sink = PostgresSink(target, group_id)
    gctune.tune()
    try:
        materializer = Materializer(
            sink, bootstrap=broker, registry=schema_registry, group_id=group_id,
            topics=topics or None, prefix=topic_prefix, on_poison=on_poison,  # type: ignore[arg-type]
            batch_size=batch_size,
        )
        if once:
            materializer.run_until_caught_up()
            return
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        materializer.run(stop)
    finally:
        sink.close()
