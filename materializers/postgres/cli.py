"""`bottler materialize postgres`: the target-Postgres replica (registered by bottler/cli.py)."""

from __future__ import annotations

import signal

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
    adopt_existing: bool = typer.Option(
        False, "--adopt-existing",
        help="Write into target tables that already hold rows the replica did not write "
        "(rows with the source's keys are overwritten; other rows and columns are kept)."),
    seed_from: str | None = typer.Option(
        None, "--seed-from", envvar="BOTTLER_SEED_DSN", show_default=False,
        help="Source database DSN: copy the captured tables from a snapshot of it straight into"
        " a new target, then follow the topics from there (the initial copy at pg_dump speed)"
        " [env: BOTTLER_SEED_DSN]"),
    seed_workers: int = typer.Option(2, "--seed-workers", envvar="BOTTLER_SEED_WORKERS",
                                     help="Parallel COPY streams of --seed-from."),
    metrics_port: int | None = options.MetricsPort,
    metrics_host: str = options.MetricsHost,
) -> None:
    """Keep a replica of the captured tables in the target database (no foreign keys)."""
    from materializers.core import Materializer
    from materializers.postgres.seed import Seeder, Stopped
    from materializers.postgres.seeds import SeedFilter
    from materializers.postgres.sink import PostgresSink

    options.poison_policy(on_poison)
    options.serve_metrics(metrics_port, metrics_host)
    sink = PostgresSink(target, group_id, adopt_existing=adopt_existing)
    gctune.tune()
    try:
        materializer = Materializer(
            sink, bootstrap=broker, registry=schema_registry, group_id=group_id,
            topics=topics or None, prefix=topic_prefix, on_poison=on_poison,  # type: ignore[arg-type]
            batch_size=batch_size,
        )
        if seed_from:
            stop = stop_on_signals()  # a stopped seed is copied again by the next start
            try:
                Seeder(seed_from, sink, materializer.decoder, bootstrap=broker,
                       prefix=topic_prefix, is_table_topic=materializer.is_table_topic,
                       workers=seed_workers, stop=stop).run()
            except Stopped:
                return
            if once:  # --once stops as it always does: on the signal itself
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        seeded = sink.seeded_tables()
        if seeded:  # whether or not --seed-from is given now: what the seed holds is skipped
            materializer.skip = SeedFilter(seeded, materializer.truncate_topic,
                                           materializer.decoder)
        if once:
            materializer.run_until_caught_up()
            return
        stop = stop_on_signals()
        materializer.run(stop)
    finally:
        sink.close()
