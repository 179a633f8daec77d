"""The capture from start to finish: checks, slot and snapshot (or resume), then the stream."""

from __future__ import annotations

import logging
import threading

from confluent_kafka.admin import AdminClient

from capture import metrics, snapshot, source, state, topics
from capture.control import ControlEvents
from capture.pgoutput import lsn_to_str
from capture.publisher import DataError, Publisher
from capture.registrar import Registrar
from capture.settings import CaptureSettings
from capture.slot import create_slot, drop_slot, slot_exists
from capture.stream import Streamer
from capture.tables import Tables
from common import gctune
from common.errors import BottlerError
from common.kafka import check_broker
from common.redact import redact

log = logging.getLogger(__name__)


def run_capture(settings: CaptureSettings, stop: threading.Event | None = None) -> None:
    stop = stop or threading.Event()
    s = settings
    log.info("capture: %s → %s (slot %s, publication %s, %s)", redact(s.postgres), s.broker,
             s.slot, s.publication_name, s.output_format)
    if s.metrics_port:
        metrics.serve(s.metrics_port, s.metrics_host, s.postgres, s.slot)

    catalog = source.session_connect(s.postgres, autocommit=True)
    source.preflight(catalog, s.slot)
    # Kafka and the registry are checked before anything is created in the database.
    check_broker(s.kafka)  # a wrong property fails here, in one line
    admin = AdminClient({**s.kafka, "log_level": 2})
    registrar = Registrar(s.schema_registry) if s.output_format == "avro" else None
    if registrar:
        registrar.check()
    source.ensure_publication(catalog, s.publication_name, s.tables)
    published = source.published_tables(catalog, s.publication_name, s.tables)
    source.check_keys(published, s.allow_unkeyed)
    source.check_toast(catalog, published, s.replica_identity_full)

    control = ControlEvents(s.topic_prefix, s.output_format, registrar)
    progress = state.CaptureState(s.broker, s.topic_prefix, s.kafka_config)
    # Control events must outlive every table message they refer to: no time-based deletion.
    topics.ensure_topics(admin, [progress.topic], config=s.topic_config)
    topics.ensure_topics(admin, [], control.topics, config={**s.topic_config, "retention.ms": "-1"})

    tables = Tables(catalog, registrar, admin, s.topic_prefix, s.output_format,
                    s.allow_unkeyed, s.topic_config)
    publisher = Publisher(s.broker, s.kafka_config, on_data_error=_policy(s.on_error))

    recorded = progress.read(s.slot)
    if slot_exists(s.postgres, s.slot):
        if recorded and recorded.get("snapshot") == state.SNAPSHOT_STARTED:
            log.warning("slot %s exists but its snapshot never completed: starting over", s.slot)
            drop_slot(s.postgres, s.slot)
        else:
            log.info("slot %s exists: resuming the stream where it left off", s.slot)
    if not slot_exists(s.postgres, s.slot):
        _new_slot(s, progress, tables)
    metrics.SNAPSHOT_DONE.set(1)  # copied now, before, or skipped: the stream is what follows

    streamer = Streamer(
        s.postgres, s.slot, s.publication_name, tables, control, publisher, admin,
        heartbeats=catalog, heartbeat_interval=s.heartbeat_interval,
        confirm_delay=s.confirm_delay,
        transaction_topic=s.transaction_topic,
    )
    gctune.tune()
    try:
        streamer.run(stop)
    finally:
        catalog.close()
    log.info("capture stopped; confirmed up to %s", lsn_to_str(streamer.confirmed_sent))


def _new_slot(s: CaptureSettings, progress: state.CaptureState, tables: Tables) -> None:
    if s.skip_snapshot:
        progress.write(s.slot, snapshot=state.SNAPSHOT_SKIPPED)
        create_slot(s.postgres, s.slot).release()
        log.info("created slot %s; snapshot skipped (--skip-snapshot)", s.slot)
        return
    progress.write(s.slot, snapshot=state.SNAPSHOT_STARTED)
    new = create_slot(s.postgres, s.slot)
    log.info("created slot %s at %s; snapshot %s", s.slot, lsn_to_str(new.consistent_lsn),
             new.snapshot)
    try:
        with source.session_connect(s.postgres) as conn:
            # Table descriptions as of the snapshot, so the copy and its schemas agree.
            conn.execute("begin isolation level repeatable read read only")
            conn.execute(f"set transaction snapshot '{new.snapshot}'")
            in_snapshot = source.published_tables(conn, s.publication_name, s.tables)
            specs = {t.oid: tables.spec(t) for t in in_snapshot}
            chunks = snapshot.plan(conn, in_snapshot, specs, s.snapshot_workers)
            estimates = dict(conn.execute(  # for the progress bars
                "select n.nspname || '.' || c.relname, greatest(c.reltuples, 0)::bigint "
                "from pg_class c join pg_namespace n on n.oid = c.relnamespace "
                "where c.oid = any(%s)", ([t.oid for t in in_snapshot],),
            ).fetchall())
            conn.rollback()
        rows = snapshot.copy_tables(
            s.postgres, new.snapshot, chunks, estimates, s.snapshot_workers,
            {"bootstrap": s.broker, "extra_config": s.kafka_config}, s.on_error,
        )
    finally:
        new.release()
    progress.write(s.slot, snapshot=state.SNAPSHOT_COMPLETE, rows=rows,
                   consistent_lsn=new.consistent_lsn)


def _policy(on_error: str):
    def handle(error: DataError) -> None:
        if on_error == "exit":
            raise BottlerError(str(error), "or pass --on-error=log to skip such rows")
        metrics.DATA_ERRORS.inc()
        log.error("skipped (--on-error=log): %s", error)

    return handle

