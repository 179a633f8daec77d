"""`bottler materialize postgres`: the target-Postgres replica (registered by bottler/cli.py)."""

from __future__ import annotations

import signal
from typing import Annotated

from pydantic import Field

from common import gctune, options, seedlock
from common.config import MetricsSettings, env
from common.flags import Flag
from common.options import settings_command
from common.signals import stop_on_signals
from materializers.postgres import APPLICATION_NAME as REPLICA_APPLICATION_NAME
from materializers.postgres import DEFAULT_GROUP, SEED_CHUNK_PAGES


class ReplicaSettings(options.ViewSettings, MetricsSettings):
    target: Annotated[str, Flag("--target", "-t", help="Target database DSN")] = Field(
        validation_alias=env("BOTTLER_TARGET_DSN"))
    topics: Annotated[list[str], options.TOPICS] = []
    batch_size: Annotated[int, options.BATCH_SIZE] = Field(5000, ge=1)
    once: Annotated[bool, options.ONCE] = False
    group_id: Annotated[str, options.GROUP_ID] = DEFAULT_GROUP
    adopt_existing: Annotated[bool, Flag(
        "--adopt-existing", help="Write into target tables that already hold rows the replica "
        "did not write (rows with the source's keys are overwritten; other rows and columns are "
        "kept).")] = False
    seed_from: Annotated[str | None, Flag(
        "--seed-from", help="Source database DSN: copy the captured tables from a snapshot of it"
        " straight into a new target, then follow the topics from there (the initial copy at "
        "pg_dump speed)")] = Field(None, validation_alias=env("BOTTLER_SEED_DSN"))
    seed_workers: Annotated[int, Flag(
        "--seed-workers", help="Parallel COPY streams of --seed-from")] = Field(2, ge=1)
    seed_chunk_pages: Annotated[int, Flag(
        "--seed-chunk-pages", help="Pages (8 kB) per range a --seed-from stream copies in one "
        "transaction")] = Field(SEED_CHUNK_PAGES, ge=1)
    join_group: Annotated[bool, options.JOIN_GROUP] = False
    instance_id: Annotated[str | None, options.INSTANCE_ID] = None


@settings_command
def materialize_postgres(s: ReplicaSettings) -> None:
    """Keep a replica of the captured tables in the target database (no foreign keys)."""
    # the mark first, before this process's own start-up: a capture starting beside the seed
    # does not start its snapshot workers meanwhile (common.seedlock)
    marker = seedlock.marker(s.seed_from, REPLICA_APPLICATION_NAME) if s.seed_from else None
    from materializers.core import Materializer
    from materializers.postgres.adoption import topic_ends
    from materializers.postgres.seeding import Stopped
    from materializers.postgres.seeding.handover import SeedFilter
    from materializers.postgres.seeding.seeder import Seeder
    from materializers.postgres.sink import PostgresSink

    s.check_clients()
    options.serve_metrics(s.metrics_port, s.metrics_host)
    sink = PostgresSink(s.target, s.group_id, adopt_existing=s.adopt_existing)
    try:
        materializer = Materializer(
            sink, bootstrap=s.kafka, registry=s.schema_registry, group_id=s.group_id,
            topics=s.topics or None, prefix=s.topic_prefix, on_poison=s.on_poison,
            batch_size=s.batch_size, join_group=s.join_group, instance_id=s.instance_id,
        )
        if s.adopt_existing and not sink.adoption_started:  # the point, before any read
            sink.begin_adoption(topic_ends(s.kafka, s.group_id, materializer.is_table_topic,
                                           materializer.truncate_topic))
        # one stop event from here on: a signal between the seed's end and the loop's start
        # stops the loop (a stopped seed is copied again by the next start)
        stop = stop_on_signals() if s.seed_from or not s.once else None
        if s.seed_from:
            try:
                Seeder(s.seed_from, sink, materializer.decoder, bootstrap=s.kafka,
                       prefix=s.topic_prefix, is_table_topic=materializer.is_table_topic,
                       workers=s.seed_workers, chunk_pages=s.seed_chunk_pages,
                       stop=stop, marker=marker).run()
            except Stopped:
                return
            if s.once:  # --once stops as it always does: on the signal itself
                if stop.is_set():
                    return
                signal.signal(signal.SIGINT, signal.default_int_handler)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
        gctune.tune()  # for the loop: after the seed, whose start waits on this process's
        seeded = sink.seeded_tables()
        if seeded:  # whether or not --seed-from is given now: what the seed holds is skipped
            materializer.skip = SeedFilter(seeded, materializer.truncate_topic,
                                           materializer.decoder)
        if s.once:
            materializer.run_until_caught_up()
            return
        materializer.run(stop)
    except Exception:
        sink.abandon()  # a failed start leaves no bookkeeping schema behind
        raise
    finally:
        sink.close()
