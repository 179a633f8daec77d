"""The seed's steps (see :mod:`materializers.postgres.seeding`): plan which tables to copy, take a
snapshot of the source, make each target table ready, and copy its page ranges in parallel."""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import psycopg
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from common import seedlock
from common.errors import BottlerError
from common.kafka import Connection
from common.lsn import Lsn
from common.pg import connect
from common.redact import redact
from materializers.core.changes import TableId, table_of
from materializers.core.decode import Decoder
from materializers.postgres import APPLICATION_NAME, SEED_CHUNK_PAGES, relay
from materializers.postgres.ddl import qualified, quote
from materializers.postgres.seeding import Stopped
from materializers.postgres.seeding.capture_watch import CaptureWatch
from materializers.postgres.seeding.handover import COPYING, NOT_SEEDED
from materializers.postgres.seeding.progress import Progress
from materializers.postgres.seeding.tables import (
    SeedTable,
    defer_key,
    holds_rows,
    restore_key,
)
from materializers.postgres.sink import PostgresSink
from schemas.pgtypes import libpq_options, session_statements

log = logging.getLogger(__name__)

SEED_WORKERS = 2  # parallel COPY streams: about the best on 2 cores (docs/migration.md)


class Seeder(CaptureWatch):
    """Seeds the target of ``sink`` from ``source_dsn`` (see the package's docstring)."""

    def __init__(self, source_dsn: str, sink: PostgresSink, decoder: Decoder, *,
                 bootstrap: Connection, prefix: str, is_table_topic, workers: int = SEED_WORKERS,
                 chunk_pages: int = SEED_CHUNK_PAGES, stop: threading.Event | None = None,
                 marker: psycopg.Connection | None = None):
        if workers < 1:
            raise ValueError(f"seed workers must be at least 1, not {workers}")
        self.source_dsn = source_dsn
        self.sink = sink
        self.decoder = decoder
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.is_table_topic = is_table_topic
        self.workers = workers
        self.chunk_pages = chunk_pages
        self.stop = stop or threading.Event()
        self.group_id = sink.group_id
        self.rows = 0  # rows copied by this run
        self.same_version = False  # source and target of one major version (binary COPY)
        self.marker = marker  # holds the seed's lock (_mark), if the caller took it already
        self.capture_state: dict[str, dict | None] = {}  # the capture's records, by key
        self.read_state = 0  # the next offset of them to read
        self.marked_at = time.monotonic() if marker is not None else 0.0
        self.looker: Consumer | None = None  # see _looker

    def run(self) -> None:
        """Seed what is still to seed; returns at once for a target seeded (or run) before.
        Raises :class:`Stopped` if the stop event is set meanwhile."""
        if (problem := relay.problem()) is not None:
            raise BottlerError(f"cannot seed the target: {problem}")
        try:
            with self._target() as conn:
                recorded = conn.execute(
                    "select topic, schema_name, table_name, state from bottler.seeds"
                    " where group_id = %s", (self.group_id,)).fetchall()
                if not recorded:
                    stored = conn.execute("select 1 from bottler.offsets where group_id = %s"
                                          " limit 1", (self.group_id,)).fetchone()
                    if stored:
                        log.info("seed: the replica has stored offsets in this target already"
                                 " (group %s): not seeded, it goes on from the topics",
                                 self.group_id)
                        return
                    self._mark()  # before the capture even starts its snapshot's workers
                    recorded = self._plan(conn)
            pending = [SeedTable(topic, TableId(schema, table))
                       for topic, schema, table, state in recorded if state == COPYING]
            if pending:
                self._copy(pending)
        finally:
            self._unmark()
            if self.looker is not None:
                self.looker.close()
                self.looker = None

    def _mark(self) -> None:
        """From now until the copy ends, the capture's snapshot workers wait (common.seedlock):
        from the seed's start (the replica's CLI marks before its own start-up), so that they
        do not even start meanwhile."""
        if self.marker is None:
            self.marker = seedlock.marker(self.source_dsn, APPLICATION_NAME)
            self.marked_at = time.monotonic()

    def _unmark(self) -> None:
        if self.marker is not None:
            self.marker.close()  # the capture's snapshot goes on
            self.marker = None

    def _target(self) -> psycopg.Connection:
        return _session(self.sink.target_dsn)

    def _connect(self, dsn: str) -> psycopg.Connection:
        return _session(dsn)

    # -- plan ----------------------------------------------------------------------------

    def _plan(self, conn: psycopg.Connection) -> list[tuple]:
        self._wait_for_capture()
        rows = []
        for topic in sorted(self._topics()):
            schemas = self._latest(topic)
            if schemas is None:
                continue  # not a table topic
            (_, value), key = schemas
            table = table_of(value)
            reason = None
            if key is None:
                reason = "no primary key"
            elif holds_rows(conn, table):
                reason = "the target table holds rows"
            rows.append((topic, table.schema, table.table, NOT_SEEDED if reason else COPYING,
                         reason))
        with conn.transaction(), conn.cursor() as cur:
            cur.executemany(
                "insert into bottler.seeds (group_id, topic, schema_name, table_name,"
                " state, reason) values (%s, %s, %s, %s, %s, %s)",
                [(self.group_id, *row) for row in rows])
        for topic, schema, table, _state, reason in rows:
            if reason:
                log.info("seed: %s.%s not seeded (%s): its rows come from %s", schema, table,
                         reason, topic)
        log.info("seed: %d of %d tables to copy from the source",
                 sum(r[3] == COPYING for r in rows), len(rows))
        return [row[:4] for row in rows]

    # -- copy ----------------------------------------------------------------------------

    def _copy(self, pending: list[SeedTable]) -> None:
        started = time.monotonic()
        partitions = self._partitions([t.topic for t in pending])
        starts = {t.topic: self._end_offsets(t.topic, partitions.get(t.topic, [])) for t in
                  pending}
        opened: list[psycopg.Connection] = []
        try:
            self._mark()
            holder, snapshot, skip_below, snapshot_lsn = self._snapshot(opened)
            log.info("seed: snapshot at %s (copying %d tables with %d workers)",
                     Lsn(snapshot_lsn), len(pending), self.workers)
            target = self._connect(self.sink.target_dsn)
            opened.append(target)
            self.same_version = (holder.info.server_version // 10000
                                 == target.info.server_version // 10000)
            chunks = []
            for table in pending:
                chunks += self._prepare(holder, target, table)
            done = Progress(self, skip_below, snapshot_lsn, starts, pending)
            with ThreadPoolExecutor(self.workers, thread_name_prefix="seed") as pool:
                queue = list(reversed(chunks))
                lock = threading.Lock()
                futures = [pool.submit(self._work, snapshot, target, queue, lock, done)
                           for _ in range(self.workers)]
                for future in futures:
                    future.result()
            done.finish_failed(target)
        finally:
            for conn in opened:
                conn.close()
        elapsed = time.monotonic() - started
        log.info("seed: copied %d rows of %d tables in %.1f s (%.0f rows/s)", self.rows,
                 sum(t.failed is None for t in pending), elapsed,
                 self.rows / elapsed if elapsed else 0)

    def _partitions(self, topics: Sequence[str]) -> dict[str, list[int]]:
        """The partitions of ``topics``: the plan chose them, so no need to read the capture's
        ownership records again (which cost up to half a second: see CaptureWatch._consumer)."""
        metadata = self._looker().list_topics(timeout=10).topics
        return {t: sorted(metadata[t].partitions) for t in topics if t in metadata}

    def _end_offsets(self, topic: str, partitions: Sequence[int]) -> dict[int, int]:
        consumer = self._looker()
        return {p: consumer.get_watermark_offsets(KafkaTopicPartition(topic, p),
                                                  timeout=10, cached=False)[1]
                for p in partitions}

    def _snapshot(self, opened: list[psycopg.Connection]
                  ) -> tuple[psycopg.Connection, str, int, int]:
        """A connection holding one snapshot of the source, exported again for the workers'
        sessions (valid while it is open: it goes into ``opened``), the snapshot's name, the
        WAL insert position B before it and its consistent point S."""
        before = self.marker.execute(  # the seed's own session on the source (_mark)
            "select pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()[0]
        try:
            slot = psycopg.connect(self.source_dsn, replication="database", autocommit=True,
                                   connect_timeout=10, application_name=APPLICATION_NAME)
        except psycopg.OperationalError as exc:
            raise BottlerError(
                f"cannot open a replication connection to {redact(self.source_dsn)} for the"
                f" seed: {redact(str(exc).strip())}",
                "the seed needs what the capture needs: a role with REPLICATION and a free"
                " replication slot (see docs/capture.md)") from None
        with slot:
            name = f"bottler_seed_{os.getpid()}_{uuid.uuid4().hex[:8]}"
            result = slot.pgconn.exec_(
                f'CREATE_REPLICATION_SLOT "{name}" TEMPORARY LOGICAL pgoutput'
                " EXPORT_SNAPSHOT".encode())
            if result.status != psycopg.pq.ExecStatus.TUPLES_OK:
                raise BottlerError(
                    "cannot create the seed's temporary replication slot: "
                    + result.error_message.decode(errors="replace").strip(),
                    "raise max_replication_slots (and max_wal_senders) by one, or drop an"
                    " unused slot (bottler slot status)")
            consistent = Lsn.parse(result.get_value(0, 1).decode())
            holder = self._connect(self.source_dsn)
            opened.append(holder)
            holder.execute("begin isolation level repeatable read read only")
            holder.execute(f"set transaction snapshot '{result.get_value(0, 2).decode()}'")
            snapshot = holder.execute("select pg_export_snapshot()").fetchone()[0]
            # idle in its transaction until the copy ends: no server timeout may end it
            holder.execute("set idle_in_transaction_session_timeout = 0")
        # the slot is gone with its connection: the holder keeps the snapshot
        return holder, snapshot, int(before), consistent

    def _prepare(self, source: psycopg.Connection, target: psycopg.Connection,
                 table: SeedTable) -> list[tuple[SeedTable, int, int | None]]:
        """The target table ready and empty, and the page ranges to copy; none if the table
        cannot be seeded (then marked so, and read from its topic)."""
        found = source.execute(
            "select a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid < 16384,"
            " a.attgenerated <> '' from pg_attribute a"
            " where a.attrelid = to_regclass(%s) and a.attnum > 0 and not a.attisdropped"
            " order by a.attnum", (qualified(table.id),)).fetchall()
        # the topic's columns: with the generated ones where the capture publishes them
        # (PostgreSQL 18's publish_generated_columns), else without
        every = [(name, type_) for name, type_, _, _ in found]
        columns = [(name, type_) for name, type_, _, generated in found if not generated]
        if not columns:
            table.failed = "the table is not in the source's snapshot"
            return []
        versions = self._versions(table.topic)
        match = None
        for shape in (every, columns):
            if match := next(((i, s) for i, s in versions if _fields(s) == shape), None):
                columns = shape
                break
        key = self._subject_latest(f"{table.topic}-key")
        if match is None or key is None:
            table.failed = ("no value schema of its topic has the source's columns"
                            f" {', '.join(f'{n} {t}' for n, t in columns)}")
            return []
        schema_id, schema = match
        restore_key(target, table.id, [f.get("pg.name", f["name"]) for f in key[1]["fields"]])
        made = self.sink.prepare_seed(table.id, schema_id, schema, key[1])
        self.sink.flush()
        source_types = dict(columns)
        for column, target_type in made:
            if target_type not in (source_types[column], "text"):
                table.failed = (f"its column {column} is {target_type} in the target and"
                                f" {source_types[column]} in the source")
                return []
        table.columns = [column for column, _ in made]
        # Binary COPY skips formatting and parsing every value (about a quarter faster), but
        # it is exact only between servers of one major version, for the same types, and for
        # built-in ones (binary arrays and records carry type OIDs, which differ between
        # databases for types users create); otherwise text, as pg_dump uses.
        table.binary = (self.same_version and all(builtin for _, _, builtin, _ in found)
                        and all(target_type == source_types[column]
                                for column, target_type in made))
        target.execute(f"truncate {qualified(table.id)}")  # an unfinished attempt's rows
        table.deferred_key = defer_key(target, table.id)
        target.commit()
        pages = source.execute(
            "select pg_relation_size(to_regclass(%s)) / current_setting('block_size')::int",
            (qualified(table.id),)).fetchone()[0]
        # ranges of at most chunk_pages, as many as make whole rounds of the workers: no worker
        # idles while another copies the last range
        count = -(-max(pages, 1) // self.chunk_pages)
        size = -(-max(pages, 1) // (-(-count // self.workers) * self.workers))
        bounds = list(range(0, max(pages, 1), size))
        chunks = [(table, lo, lo + size) for lo in bounds]
        chunks[-1] = (table, bounds[-1], None)  # and whatever lies beyond
        table.chunks = table.ranges = len(chunks)
        return chunks

    def _work(self, snapshot: str, target: psycopg.Connection, queue: list,
              lock: threading.Lock, done: Progress) -> None:
        source = relay.Side(self.source_dsn, ("begin isolation level repeatable read read only",
                                              f"set transaction snapshot '{snapshot}'"),
                            libpq_options(), APPLICATION_NAME)
        into = relay.Side(self.sink.target_dsn, (), libpq_options(), APPLICATION_NAME)
        while True:
            if self.stop.is_set():
                raise Stopped()
            with lock:
                if not queue:
                    return
                table, lo, hi = queue.pop()
            if table.failed is not None:
                continue
            columns = ", ".join(quote(c) for c in table.columns)
            where = f"ctid >= '({lo},0)'::tid" + (f" and ctid < '({hi},0)'::tid" if hi else "")
            form = " (format binary)" if table.binary else ""
            try:
                rows = relay.copy(
                    source, f"copy (select {columns} from {qualified(table.id)} where {where})"
                            f" to stdout{form}",
                    into, f"copy {qualified(table.id)} ({columns}) from stdin{form}", self.stop)
            except relay.Refused as exc:
                done.fail(table, f"the target refused its rows: {exc}")
                continue
            except relay.Stopped:
                raise Stopped() from None
            done.chunk(target, table, rows)



def _fields(schema: dict) -> list[tuple[str, str]]:
    return [(f.get("pg.name", f["name"]), f.get("pg.type", "")) for f in schema["fields"]]


def _session(dsn: str) -> psycopg.Connection:
    conn = connect(dsn, application_name=APPLICATION_NAME)
    for statement in session_statements():
        conn.execute(statement)
    conn.commit()
    return conn
