"""The replica's initial copy from the source itself (``--seed-from``): each captured table
COPYed from a snapshot of the source straight into the target, in parallel page ranges, at
``pg_dump`` speed; the topics then take over where the snapshot ends
(:mod:`materializers.postgres.seeds` says why nothing is applied twice or missed).

Steps, once per target and consumer group (a target with offsets stored already is not seeded):

1. **Plan.** Wait until the capture has made its slot and its topics (its progress record in
   ``_bottler.capture``), then record in ``bottler.seeds`` every table topic to seed (state
   ``copying``) or not (``not seeded``, with the reason: unkeyed, the target table holds rows).
   The set is fixed here: tables that join the capture later are read from their topics.
2. **Snapshot.** The topics' end offsets, then the source's WAL insert position B, then a
   temporary logical slot exporting a snapshot (consistent point S ≥ B), imported by every
   worker; the slot goes as soon as they hold the snapshot.
3. **Copy.** Per table: the source's columns in the snapshot checked against the topic's value
   schema of that moment, the target table made by the replica's own rules (created, or adopted
   when empty), emptied (rows of an earlier, unfinished attempt), then its pages cut into
   ranges that the workers pipe ``COPY (SELECT … WHERE ctid …) TO STDOUT`` → ``COPY … FROM
   STDIN`` through two ``psql`` processes (:mod:`materializers.postgres.relay`), a transaction
   per range. The range that completes a table also marks it ``done`` with B, S and the
   offsets, in its own transaction.

A crash or a stop leaves some tables ``copying``: the next start empties them and copies them
again under a new snapshot; ``done`` tables keep theirs.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import psycopg
from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.schema_registry.error import SchemaRegistryError

from common import seedlock
from common.errors import BottlerError
from common.kafka import Connection, reader_config
from common.lsn import Lsn
from common.pg import connect
from common.redact import redact
from materializers.core.changes import TableId, table_of
from materializers.core.decode import Decoder
from materializers.postgres import APPLICATION_NAME, SEED_CHUNK_PAGES, relay
from materializers.postgres.ddl import qualified, quote
from materializers.postgres.seeds import COPYING, DONE, NOT_SEEDED
from materializers.postgres.sink import PostgresSink
from schemas import progress as progress_records
from schemas.pgtypes import libpq_options, session_statements
from schemas.topics import STATE, with_prefix

log = logging.getLogger(__name__)

SEED_WORKERS = 2  # parallel COPY streams: about the best on 2 cores (docs/migration.md)
PROGRESS_EVERY = 10.0  # seconds between progress lines while a table is copied
CAPTURE_WAIT_LOG = 10.0  # seconds between "waiting for the capture" lines
CAPTURE_POLL = 0.05  # seconds between looks at the capture's records
# A seed marks itself from its start (see _mark), but while its capture has not started a
# snapshot, for at most this many seconds: a seed waiting for a capture that is not there (a
# wrong prefix) must not hold up the snapshot of another capture of the same database.
MARK_ALONE = 10.0


class Stopped(Exception):  # noqa: N818 - a stop request, not an error
    """A stop was requested during the seed: unfinished tables are copied again next time."""


@dataclass
class _Table:
    topic: str
    id: TableId
    columns: list[str] = field(default_factory=list)
    chunks: int = 0  # ranges not copied yet
    ranges: int = 0
    binary: bool = False  # COPY in binary format (see _prepare)
    deferred_key: list[str] | None = None  # primary key columns, dropped until the copy ends
    rows: int = 0
    failed: str | None = None


class Seeder:
    """Seeds the target of ``sink`` from ``source_dsn``; see the module's docstring."""

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
            pending = [_Table(topic, TableId(schema, table))
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
            elif _holds_rows(conn, table):
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

    def _wait_for_capture(self) -> None:
        """Until the capture has made its slot and its tables' topics: its progress record
        names a snapshot with its layout (written after both), or one complete or skipped."""
        topic = with_prefix(self.prefix, STATE)
        said = 0.0
        consumer = self._looker()
        while not self._capture_ready(consumer, topic):
            if (self.marker is not None and time.monotonic() - self.marked_at > MARK_ALONE
                    and not any(s and progress_records.is_started(s)
                                for s in self.capture_state.values())):
                self._unmark()  # no snapshot of its capture under way: hold up no other
            if time.monotonic() - said >= CAPTURE_WAIT_LOG:
                log.info("seed: waiting for the capture (prefix %r) to create its slot and"
                         " topics (%s)", self.prefix, topic)
                said = time.monotonic()
            if self.stop.wait(CAPTURE_POLL):
                raise Stopped()

    def _consumer(self) -> Consumer:
        """A consumer that only looks (watermarks, metadata, the capture's records)."""
        return Consumer(reader_config(self.bootstrap, "seed"))

    def _capture_ready(self, consumer: Consumer, topic: str) -> bool:
        """Reads the capture's records (from where the last look ended); a snapshot starting
        marks the seed (``_mark``), one with its layout (or complete, or skipped) is ready."""
        tp = KafkaTopicPartition(topic, 0, 0)
        try:
            _, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        except KafkaException:
            return False  # no such topic yet
        if high <= self.read_state:
            return False
        # assigned only while it reads: nothing to fetch between two reads
        consumer.assign([KafkaTopicPartition(topic, 0, self.read_state)])
        try:
            while self.read_state < high:
                msg = consumer.poll(10)
                if msg is None or msg.error():
                    return False
                self.read_state = msg.offset() + 1
                key = (msg.key() or b"").decode()
                if progress_records.is_slot_key(key):
                    self.capture_state[key] = json.loads(msg.value()) if msg.value() else None
        finally:
            consumer.unassign()
        states = [s for s in self.capture_state.values() if s]
        if any(progress_records.is_started(s) for s in states):
            self._mark()
        return any(progress_records.slot_and_topics_made(s) for s in states)

    def _looker(self) -> Consumer:
        """The seed's one consumer that only looks (closed when the seed ends)."""
        if self.looker is None:
            self.looker = self._consumer()
        return self.looker

    def _topics(self) -> dict[str, list[int]]:
        """The table topics and their partitions."""
        metadata = self._looker().list_topics(timeout=10)
        refresh = getattr(self.is_table_topic, "refresh", None)  # the capture's own topics
        if refresh is not None:
            refresh(metadata.topics)
        return {t: sorted(m.partitions) for t, m in metadata.topics.items()
                if self.is_table_topic(t)}

    def _latest(self, topic: str) -> tuple[tuple[int, dict], dict | None] | None:
        """((value schema id, value schema), key schema) of the topic's latest registration;
        None if it has no value schema of a table."""
        versions = self._versions(topic)
        if not versions:
            return None
        value = versions[0]
        if "pg.table" not in value[1]:
            return None
        key = self._subject_latest(f"{topic}-key")
        return value, (key[1] if key else None)

    def _versions(self, topic: str) -> list[tuple[int, dict]]:
        """The value schemas of ``topic``, newest first, as (id, schema as the loop reads it)."""
        registry = self.decoder.registry
        try:
            numbers = registry.get_versions(f"{topic}-value")
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return []
            raise
        found = []
        for number in sorted(numbers, reverse=True):
            registered = registry.get_version(f"{topic}-value", number)
            found.append((registered.schema_id,
                          self.decoder.schema(registered.schema_id).schema))
        return found

    def _subject_latest(self, subject: str) -> tuple[int, dict] | None:
        try:
            registered = self.decoder.registry.get_latest_version(subject)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return None
            raise
        return registered.schema_id, self.decoder.schema(registered.schema_id).schema

    # -- copy ----------------------------------------------------------------------------

    def _copy(self, pending: list[_Table]) -> None:
        started = time.monotonic()
        partitions = self._topics()
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
            done = _Progress(self, skip_below, snapshot_lsn, starts, pending)
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
                 table: _Table) -> list[tuple[_Table, int, int | None]]:
        """The target table ready and empty, and the page ranges to copy; none if the table
        cannot be seeded (then marked so, and read from its topic)."""
        found = source.execute(
            "select a.attname, format_type(a.atttypid, a.atttypmod), a.atttypid < 16384"
            " from pg_attribute a"
            " where a.attrelid = to_regclass(%s) and a.attnum > 0 and not a.attisdropped"
            " and a.attgenerated = '' order by a.attnum", (qualified(table.id),)).fetchall()
        columns = [(name, type_) for name, type_, _ in found]
        if not columns:
            table.failed = "the table is not in the source's snapshot"
            return []
        versions = self._versions(table.topic)
        match = next(((i, s) for i, s in versions if _fields(s) == columns), None)
        key = self._subject_latest(f"{table.topic}-key")
        if match is None or key is None:
            table.failed = ("no value schema of its topic has the source's columns"
                            f" {', '.join(f'{n} {t}' for n, t in columns)}")
            return []
        schema_id, schema = match
        _restore_key(target, table.id, [f.get("pg.name", f["name"]) for f in key[1]["fields"]])
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
        table.binary = (self.same_version and all(builtin for _, _, builtin in found)
                        and all(target_type == source_types[column]
                                for column, target_type in made))
        target.execute(f"truncate {qualified(table.id)}")  # an unfinished attempt's rows
        table.deferred_key = _defer_key(target, table.id)
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
              lock: threading.Lock, done: _Progress) -> None:
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


class _Progress:
    """Counts each table's ranges as they commit; the last one marks the table done."""

    def __init__(self, seeder: Seeder, skip_below: int, snapshot_lsn: int,
                 starts: dict[str, dict[int, int]], tables: list[_Table]):
        self.seeder = seeder
        self.skip_below = skip_below
        self.snapshot_lsn = snapshot_lsn
        self.starts = starts
        self.tables = tables
        self.lock = threading.Lock()
        self.said = time.monotonic()

    def chunk(self, target: psycopg.Connection, table: _Table, rows: int) -> None:
        with self.lock:  # held over the commit: exactly one range is the last
            table.rows += rows
            self.seeder.rows += rows
            table.chunks -= 1
            if table.chunks == 0 and table.failed is None and table.deferred_key:
                try:
                    _add_key(target, table.id, table.deferred_key)
                except psycopg.Error as exc:
                    target.rollback()
                    table.failed = ("its primary key could not be built after the copy:"
                                    f" {exc.diag.message_primary or exc}")
                    return
            if table.chunks == 0 and table.failed is None:
                target.execute(
                    "update bottler.seeds set state = %s, skip_below = %s, snapshot_lsn = %s,"
                    " start_offsets = %s, rows = %s, reason = null, seeded_at = now()"
                    " where group_id = %s and topic = %s",
                    (DONE, self.skip_below, self.snapshot_lsn,
                     json.dumps(self.starts[table.topic]), table.rows,
                     self.seeder.group_id, table.topic))
            target.commit()
            if table.chunks == 0 and table.failed is None:
                log.info("seed: %s: %d rows copied", table.id, table.rows)
            elif time.monotonic() - self.said >= PROGRESS_EVERY:
                log.info("seed: %s: %d of %d ranges copied (%d rows so far, %d in all)",
                         table.id, table.ranges - table.chunks, table.ranges, table.rows,
                         self.seeder.rows)
                self.said = time.monotonic()

    def fail(self, table: _Table, reason: str) -> None:
        with self.lock:
            table.failed = table.failed or reason

    def finish_failed(self, target: psycopg.Connection) -> None:
        """Tables that cannot be seeded are emptied (what ranges copied) and read from their
        topics, from offset 0."""
        for table in self.tables:
            if table.failed is None:
                continue
            log.warning("seed: %s not seeded: %s; its rows come from %s", table.id,
                        table.failed, table.topic)
            if table.columns:
                target.execute(f"truncate {qualified(table.id)}")
                if table.deferred_key:
                    _add_key(target, table.id, table.deferred_key)
            target.execute("update bottler.seeds set state = %s, reason = %s"
                           " where group_id = %s and topic = %s",
                           (NOT_SEEDED, table.failed, self.seeder.group_id, table.topic))
            target.commit()


def _fields(schema: dict) -> list[tuple[str, str]]:
    return [(f.get("pg.name", f["name"]), f.get("pg.type", "")) for f in schema["fields"]]


def _holds_rows(conn: psycopg.Connection, table: TableId) -> bool:
    exists = conn.execute("select to_regclass(%s)", (qualified(table),)).fetchone()[0]
    held = exists is not None and conn.execute(
        f"select exists (select from {qualified(table)})").fetchone()[0]
    conn.rollback()
    return held


# The primary key of a table the seed created is built after its rows are in (as pg_dump
# does: data, then post-data): one sorted index build instead of an insert per row, about a
# quarter faster. Only a table the replica created (not adopted: the user's keys and indexes
# stay as they are); a copy interrupted meanwhile leaves it without its key, which the next
# start puts back (on the emptied table) before anything else looks at it.

def _own(conn: psycopg.Connection, table: TableId) -> bool:
    """Whether the replica created the table (recorded, not adopted)."""
    row = conn.execute("select adopted from bottler.replica_tables"
                       " where schema_name = %s and table_name = %s",
                       (table.schema, table.table)).fetchone()
    return row is not None and not row[0]


def _key_of(conn: psycopg.Connection, table: TableId) -> tuple[str, list[str]] | None:
    """The table's primary key constraint: its name and columns in key order."""
    return conn.execute(
        "select c.conname::text, array_agg(a.attname::text order by k.ord)"
        " from pg_constraint c cross join unnest(c.conkey) with ordinality k(attnum, ord)"
        " join pg_attribute a on a.attrelid = c.conrelid and a.attnum = k.attnum"
        " where c.conrelid = to_regclass(%s) and c.contype = 'p' group by c.conname",
        (qualified(table),)).fetchone()


def _defer_key(conn: psycopg.Connection, table: TableId) -> list[str] | None:
    """Drops the primary key of an empty table the replica created; its columns, to add it
    back after the copy (under the same, default name)."""
    if not _own(conn, table) or (key := _key_of(conn, table)) is None:
        return None
    name, columns = key
    conn.execute(f"alter table {qualified(table)} drop constraint {quote(name)}")
    return columns


def _add_key(conn: psycopg.Connection, table: TableId, columns: list[str]) -> None:
    conn.execute(f"alter table {qualified(table)} add primary key"
                 f" ({', '.join(quote(c) for c in columns)})")


def _restore_key(conn: psycopg.Connection, table: TableId, columns: list[str]) -> None:
    """A table the replica created, left without its primary key by a copy that did not end:
    emptied (it is copied again) and given its key back."""
    exists = conn.execute("select to_regclass(%s)", (qualified(table),)).fetchone()[0]
    if exists is not None and _own(conn, table) and _key_of(conn, table) is None:
        conn.execute(f"truncate {qualified(table)}")
        _add_key(conn, table, columns)
    conn.commit()


def _session(dsn: str) -> psycopg.Connection:
    conn = connect(dsn, application_name=APPLICATION_NAME)
    for statement in session_statements():
        conn.execute(statement)
    conn.commit()
    return conn
