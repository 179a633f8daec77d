"""The capture from start to finish: checks, then publications, topics and slot (removed again if
the start fails), the snapshot (new, or resumed), then the stream."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from confluent_kafka.admin import AdminClient

from capture.health import metrics, slot_safety
from capture.publish.control import ControlEvents, control_topics
from capture.publish.dead_letters import ErrorPolicy, OnError
from capture.publish.producer_config import producer_config, transactional_config
from capture.publish.publisher import Publisher
from capture.publish.registrar import Registrar
from capture.publish.transactional import KafkaTransactions, transactional_id
from capture.settings import CaptureSettings
from capture.setup import state, topics
from capture.setup.topics import TopicSet
from capture.setup.undo import Undo
from capture.snapshot import exported
from capture.source import database, standby
from capture.source.publication import Publications, Watcher
from capture.source.slot import create_slot, drop_slot, failover_wanted
from capture.stream.replication import StreamOptions, streaming_wanted
from capture.stream.streamer import Streamer
from capture.stream.tables import Tables
from common import gctune
from common.errors import BottlerError
from common.kafka import check_broker, client_config
from common.lsn import Lsn
from common.redact import redact
from schemas import progress as progress_records
from schemas.topics import STATE, with_prefix

log = logging.getLogger(__name__)


def run_capture(settings: CaptureSettings, stop: threading.Event | None = None) -> None:
    stop = stop or threading.Event()
    s = settings
    log.info("capture: %s → %s (slot %s, publication %s, %s)", redact(s.postgres), s.broker,
             s.slot, s.publication_name, s.output_format)
    if s.metrics_port:
        metrics.serve(s.metrics_port, s.metrics_host)
    watch = slot_safety.SlotWatch(s.postgres, s.slot, s.slot_warn_retained_mb * slot_safety.MIB,
                                  s.slot_warn_safe_mb * slot_safety.MIB).start()
    catalog = database.session_connect(s.postgres, autocommit=True)
    try:
        _run(s, catalog, stop)
    finally:
        catalog.close()
        watch.stop()


def _run(s: CaptureSettings, catalog, stop: threading.Event) -> None:
    # Every check runs before anything is created: the database, Kafka, the registry, the tables.
    # A standby source first (its primary's settings come before its own): writes go to its
    # primary (None: the source is the primary).
    primary = standby.primary_of(catalog, s.primary)
    s = s.model_copy(update={"primary": s.primary if primary else None})
    try:
        database.preflight(catalog, s.slot)
        _checked(s, catalog, primary or catalog, stop)
    finally:
        if primary is not None:
            primary.close()


def _checked(s: CaptureSettings, catalog, writes, stop: threading.Event) -> None:
    """The rest of the start; ``writes``: where the capture writes (the source, or the primary
    of a standby source)."""
    # The checks that wait on the broker or the registry alone run beside the others: every
    # one still ends before anything is created, and the start is that much shorter (a seed
    # waits for it). The registry's first (its client's import takes 0.13 s).
    registrar = Registrar(s.schema_registry) if s.output_format == "avro" else None
    with ThreadPoolExecutor(2, thread_name_prefix="check") as pool:
        registry_checked = pool.submit(registrar.check) if registrar else None
        # auto becomes on or off here, from what the server can do
        s = s.model_copy(
            update={"failover": "on" if failover_wanted(catalog, s.failover) else "off"})
        lost = slot_safety.is_lost(catalog, s.slot)
        if lost and not s.recover_lost_slot:
            raise slot_safety.lost_slot_error(s.slot)
        check_broker(s.kafka)  # a wrong property fails here, in one line
        # Streamed transactions are published in Kafka transactions: registered now (a
        # restart fences its predecessor's, the broker's grant is checked); a broker's first
        # transaction ever takes it half a second.
        registered = pool.submit(
            streaming_wanted, catalog.info.server_version, s.stream_large_transactions,
            lambda: KafkaTransactions(s.broker, transactional_config(s.kafka_config,
                                                                     s.topic_config),
                                      transactional_id(s.topic_prefix, s.slot)))
        admin, progress, gone, published, publications = _checked_here(s, catalog, writes, lost)
        transactions = registered.result()
        if registry_checked is not None:
            registry_checked.result()
    undo = Undo(s.postgres, admin, registrar, primary=s.primary)
    undo.progress = progress
    try:
        with undo.on_failure():
            made = _made(s, catalog, undo, registrar, progress, published, lost or gone)
        _start_and_stream(s, catalog, stop, undo, publications, made, progress, transactions)
    finally:
        progress.close()


@dataclass
class Made:
    """What the start made before its slot: the control events' encoders, the tables' topics
    (their codecs follow), the error policy."""

    control: ControlEvents
    tables: Tables
    on_error: OnError


def _made(s: CaptureSettings, catalog, undo: Undo, registrar: Registrar | None,
          progress: state.CaptureState, published: list[database.SourceTable],
          recover: bool) -> Made:
    """Every topic the start needs, made in one request, the control topics' schemas registered
    meanwhile (a seed waits for this start); a lost or gone slot recovered first."""
    admin = undo.admin
    with ThreadPoolExecutor(1, thread_name_prefix="register") as pool:
        registered = pool.submit(ControlEvents, s.topic_prefix, s.output_format, registrar)
        if recover:
            slot_safety.recover(s, admin, registered.result(), published)
        on_error = OnError.of(s.on_error, s.topic_prefix, s.slot)
        undo.ownership = state.TopicOwnership(progress, s.topic_prefix, s.slot, s.output_format)
        tables = Tables(catalog, registrar, admin, s.topic_prefix, s.output_format,
                        s.allow_unkeyed, s.topic_config, s.temporal_mode, s.partitions_of,
                        created_topics=undo.topics, ownership=undo.ownership)
        made = [TopicSet([progress.topic], config=s.topic_config),
                # Control events must outlive every table message they refer to: no time-based
                # deletion.
                TopicSet(plain=control_topics(s.topic_prefix),
                         config={**s.topic_config, "retention.ms": "-1"}),
                *tables.topic_sets(published)]
        if on_error.mode == "dead-letter":
            made.append(TopicSet(plain=[on_error.topic],
                                 config=on_error.topic_config(s.topic_config)))
        topics.ensure_topic_sets(admin, made, created=undo.topics)
        return Made(registered.result(), tables, on_error)


def _checked_here(s: CaptureSettings, catalog, writes, lost: bool):
    """The checks :func:`_checked` makes in its own thread meanwhile: the slot (its records in
    Kafka too), the tables."""
    admin = AdminClient(client_config(s.kafka, log_level=2))
    progress = state.CaptureState(s.broker, s.topic_prefix, s.kafka_config)
    progress.warm()  # the start's first record, before its slot, waits for its producer's id
    # A slot it streamed from, missing here (a failover that could not keep it): never a
    # silent new snapshot, which would leave the rows deleted meanwhile in the views
    gone = not lost and slot_safety.is_gone(catalog, s.slot, progress, admin)
    if gone and not s.recover_lost_slot:
        raise slot_safety.gone_slot_error(catalog, s.slot)
    if (lost or gone) and s.skip_snapshot:
        raise BottlerError("--recover-lost-slot snapshots every table again: it cannot be "
                           "combined with --skip-snapshot", "drop --skip-snapshot")
    publications = Publications(writes, s.slot, s.publication, s.tables, s.allow_unkeyed,
                                s.generated_columns)
    published = publications.check()
    database.check_toast(writes, published, s.replica_identity_full)
    return admin, progress, gone, published, publications


def _start_and_stream(s: CaptureSettings, catalog, stop: threading.Event, undo: Undo,
                      publications: Publications, made: Made, progress: state.CaptureState,
                      transactions: KafkaTransactions | None) -> None:
    admin, tables, on_error = undo.admin, made.tables, made.on_error
    with undo.on_failure():
        # a progress topic this start made holds no record yet (asking would wait for its leader)
        recorded = {} if progress.topic in undo.topics else progress.read_all(admin)
        job = _resume_or_restart(s, catalog, recorded, admin)
        if job is not None or _slot_lsn(catalog, s.slot) is not None:
            # the slot exists: tables that join now are copied by the stream
            undo.publications += publications.create(with_tables=False)
            standby.catch_up(catalog, publications.conn, "the capture's publications")
            if job is not None:
                undo.wrote(s.slot, recorded.get(s.slot))
                try:
                    _plan(s, job, tables, publications)
                    log.info("resuming the snapshot of slot %s: %d chunks were copied before, "
                             "%d remain, copied from a new snapshot", s.slot, len(job.done),
                             len(job.chunks))
                    progress.write(s.slot, **progress_records.started(job.consistent_lsn,
                                                                      job.layout))
                except BaseException:
                    job.release()
                    raise
        else:
            undo.publications += publications.create(with_tables=True)
            standby.catch_up(catalog, publications.conn, "the capture's publications")
            undo.wrote(s.slot, recorded.get(s.slot))
            job = _new_slot(s, progress, tables, publications, undo)
    kafka_config = producer_config(s.kafka_config, s.topic_config)
    publisher = Publisher(s.broker, kafka_config, ErrorPolicy(on_error, s.broker, kafka_config))
    if job is not None and not _copy(s, job, progress, recorded, stop, on_error, kafka_config):
        return
    metrics.SNAPSHOT_DONE.set(1)  # copied now, before, or skipped: the stream is what follows

    if transactions is not None:
        publisher.transactional(transactions)
    options = StreamOptions(
        s.postgres, s.slot, publications.existing(), s.heartbeat_interval, s.transaction_topic,
        s.incremental_chunk_rows, s.spool_dir if transactions else None, publications.generated,
        s.primary, s.stream_replay_workers)
    # heartbeats are written where the publications are: a standby is read-only
    streamer = Streamer(options, tables, made.control, publisher, admin,
                        heartbeats=publications.conn,
                        watcher=Watcher(publications) if publications.managed else None,
                        progress=progress)
    gctune.tune()
    streamer.run(stop)
    publisher.close()
    log.info("capture stopped; confirmed up to %s", Lsn(streamer.positions.confirmed))


@dataclass
class SnapshotJob:
    """A snapshot to copy: the (exported) snapshot's name, held open by ``holder``."""

    snapshot: str
    consistent_lsn: int
    holder: object  # closed once the copy ends
    layout: dict = field(default_factory=dict)
    done: set[str] = field(default_factory=set)
    chunks: list[exported.Chunk] = field(default_factory=list)
    estimates: dict[str, int] = field(default_factory=dict)

    def release(self) -> None:
        self.holder.close()


def _resume_or_restart(s: CaptureSettings, catalog, recorded: dict,
                       admin: AdminClient) -> SnapshotJob | None:
    """An existing slot whose snapshot never completed: resume the snapshot when the record of
    it matches the slot, else drop the slot so it starts over."""
    mine = recorded.get(s.slot) or {}
    lsn = _slot_lsn(catalog, s.slot)
    if lsn is not None and not mine:
        raise _foreign_slot(s, admin)
    if lsn is None or not progress_records.is_started(mine):
        if lsn is not None:
            log.info("slot %s exists: resuming the stream where it left off", s.slot)
        return None
    if (not progress_records.is_planned(mine)
            or mine.get(progress_records.CONSISTENT_LSN) != lsn):
        log.warning("slot %s exists but its snapshot never started copying: starting over",
                    s.slot)
        drop_slot(s.postgres, s.slot)
        return None
    # The slot's exported snapshot died with the process that made it. The rest is copied from
    # a new snapshot: rows committed since the slot's position are also in the stream, which
    # starts at that position and, replayed after the copy, ends with each row's latest state.
    conn = database.session_connect(s.postgres)
    conn.execute("begin isolation level repeatable read read only")
    name = conn.execute("select pg_export_snapshot()").fetchone()[0]
    done = {key.split("/chunk/", 1)[1] for key, value in recorded.items()
            if key.startswith(f"{s.slot}/chunk/") and value.get("lsn") == lsn}
    return SnapshotJob(name, lsn, conn, dict(mine[progress_records.LAYOUT]), done)


def _foreign_slot(s: CaptureSettings, admin: AdminClient) -> BottlerError:
    """The slot exists but this prefix's progress records do not know it: it streams for another
    --topic-prefix (or its records were lost). Resuming it here would start the topics without a
    snapshot, holding only the rows changed from now on."""
    states = admin.list_topics(timeout=10).topics
    others = [prefix for prefix in _prefixes(states) if prefix != s.topic_prefix
              and state.CaptureState(s.broker, prefix, s.kafka_config).read(s.slot)]
    hint = ("run with the slot's own topic prefix, or give a new --slot (a new slot snapshots "
            f"every table); `bottler slot drop --slot {s.slot}` removes the old slot")
    if len(others) == 1:
        return BottlerError(
            f"slot {s.slot} was made for --topic-prefix {others[0]!r}, not {s.topic_prefix!r}: "
            "resuming it would fill the new topics without a snapshot", hint)
    return BottlerError(
        f"slot {s.slot} exists, but the progress records of --topic-prefix {s.topic_prefix!r} "
        f"({with_prefix(s.topic_prefix, STATE)}) do not know it: resuming it would fill the "
        "topics without a snapshot", hint)


def _prefixes(topics) -> list[str]:
    """The prefixes whose captures keep progress records among ``topics``."""
    return sorted(name.removesuffix(STATE).removesuffix(".") for name in topics
                  if name == STATE or name.endswith("." + STATE))


def _new_slot(s: CaptureSettings, progress: state.CaptureState, tables: Tables,
              publications: Publications, undo: Undo) -> SnapshotJob | None:
    if s.skip_snapshot:
        # "skipped" only once the slot exists: a record saying the slot was made, with no slot,
        # is a slot gone (slot_safety.is_gone), never a first start cut short
        progress.write(s.slot, **progress_records.started())
        with standby.running_xacts(s.primary):
            create_slot(s.postgres, s.slot, s.failover == "on").release()
        undo.slot = s.slot
        progress.write(s.slot, **progress_records.skipped())
        log.info("created slot %s; snapshot skipped (--skip-snapshot)", s.slot)
        return None
    progress.write(s.slot, **progress_records.started())
    with standby.running_xacts(s.primary):
        new = create_slot(s.postgres, s.slot, s.failover == "on")
    undo.slot = s.slot
    log.info("created %sslot %s at %s; snapshot %s", "failover " * (s.failover == "on"), s.slot,
             Lsn(new.consistent_lsn), new.snapshot)
    job = SnapshotJob(new.snapshot, new.consistent_lsn, new.conn)
    try:
        _plan(s, job, tables, publications)
        progress.write(s.slot, **progress_records.started(new.consistent_lsn, job.layout))
    except BaseException:
        job.release()  # so the slot is free to be dropped
        raise
    return job


def _plan(s: CaptureSettings, job: SnapshotJob, tables: Tables,
          publications: Publications) -> None:
    """The chunks to copy, from the tables as the snapshot sees them (so copy and schemas
    agree)."""
    with database.session_connect(s.postgres) as conn:
        conn.execute("begin isolation level repeatable read read only")
        conn.execute(f"set transaction snapshot '{job.snapshot}'")
        in_snapshot = publications.published(conn)
        specs = {t.oid: tables.spec(t) for t in in_snapshot}
        job.chunks, job.layout = exported.plan(
            conn, in_snapshot, specs, s.snapshot_chunk_pages, job.layout, job.done)
        job.estimates = dict(conn.execute(  # for the progress bars
            "select n.nspname || '.' || c.relname, greatest(c.reltuples, 0)::bigint "
            "from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where c.oid = any(%s)", ([t.oid for t in in_snapshot],),
        ).fetchall())
        conn.rollback()


def _copy(s: CaptureSettings, job: SnapshotJob, progress: state.CaptureState, recorded: dict,
          stop: threading.Event, on_error: OnError, kafka_config: dict[str, str]) -> bool:
    """Copy the snapshot's chunks (a chunk partly acknowledged before: the rest of it); the
    workers record what Kafka acknowledged. False if stopped."""
    records = state.SnapshotRecords(s.broker, s.topic_prefix, s.slot, job.consistent_lsn,
                                    s.kafka_config)
    resume = records.resume_pages(recorded)
    job.chunks = [c.resumed(resume[c.id]) if c.id in resume else c for c in job.chunks]
    if partly := sum(c.id in resume for c in job.chunks):
        log.info("%d chunks resume after their acknowledged pieces", partly)
    try:
        rows = exported.copy_tables(
            s.postgres, job.snapshot, job.chunks, job.estimates, s.snapshot_workers,
            {"bootstrap": s.broker, "extra_config": kafka_config}, on_error, stop, records,
        )
    finally:
        job.release()
    if rows is None:
        log.info("capture stopped during the snapshot; the next run resumes it")
        return False
    progress.write(s.slot, **progress_records.complete(rows, job.consistent_lsn))
    progress.forget(records.keys(recorded, [c.id for c in job.chunks]))
    return True


def _slot_lsn(catalog, slot: str) -> int | None:
    """The slot's confirmed position, or None when it does not exist."""
    row = catalog.execute("select confirmed_flush_lsn::text from pg_replication_slots "
                          "where slot_name = %s", (slot,)).fetchone()
    if row is None:
        return None
    return Lsn.parse(row[0]) if row[0] else 0


