"""`bottler materialize postgres`: the target-Postgres replica (registered by bottler/cli.py)."""

from __future__ import annotations

import typer

from common import gctune, options
from common.signals import stop_on_signals


def materialize_postgres(
    target: str = typer.Option(..., "--target", "-t", envvar="BOTTLER_TARGET_DSN",
                               help="Target database DSN [env: BOTTLER_TARGET_DSN]",
                               show_default=False),
    broker: str = options.Broker,
    schema_registry: str = options.SchemaRegistry,
    topic_prefix: str = options.TopicPrefix,
    topics: list[str] | None = options.Topics,
    group_id: str = options.group_id("bottler-postgres",
                                     "Consumer group; also the key of the stored offsets."),
    on_poison: str = options.on_poison(),
    batch_size: int = options.batch_size(),
    once: bool = options.once(),
    join_group: bool = options.join_group(),
    instance_id: str | None = options.instance_id(),
    adopt_existing: bool = typer.Option(
        False, "--adopt-existing",
        help="Write into target tables that already hold rows the replica did not write "
        "(rows with the source's keys are overwritten; other rows and columns are kept)."),
    metrics_port: int | None = options.MetricsPort,
    metrics_host: str = options.MetricsHost,
) -> None:
    """Keep a replica of the captured tables in the target database (no foreign keys)."""
    from materializers.core import Materializer, poison
    from materializers.postgres.sink import PostgresSink

    poison.checked(on_poison)
    options.serve_metrics(metrics_port, metrics_host)
    sink = PostgresSink(target, group_id, adopt_existing=adopt_existing)
    gctune.tune()
    try:
        materializer = Materializer(
            sink, bootstrap=broker, registry=schema_registry, group_id=group_id,
            topics=topics or None, prefix=topic_prefix, on_poison=on_poison,  # type: ignore[arg-type]
            batch_size=batch_size, join_group=join_group, instance_id=instance_id,
        )
        if once:
            materializer.run_until_caught_up()
            return
        stop = stop_on_signals()
        materializer.run(stop)
    finally:
        sink.close()
