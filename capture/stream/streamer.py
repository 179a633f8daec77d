"""The live stream: pgoutput changes from the slot, published to Kafka in commit order, with the
slot's confirmed position advanced only behind Kafka's acknowledgements."""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import psycopg2
from confluent_kafka.admin import AdminClient

from capture.health import metrics, slot_safety
from capture.publish.control import ControlEvents
from capture.publish.dead_letters import Row
from capture.publish.publisher import DataError, Publisher
from capture.setup import topics
from capture.setup.state import CaptureState
from capture.snapshot.incremental import SIGNAL_PREFIX, WATERMARK_PREFIX, IncrementalSnapshots
from capture.source.database import describe_oids
from capture.source.publication import Watcher
from capture.source.slot import replication_connect
from capture.stream import pgoutput
from capture.stream.drift import Drift
from capture.stream.pgoutput import UNCHANGED
from capture.stream.spool import Spool
from capture.stream.tables import Tables, UnkeyedTable
from common.errors import BottlerError
from common.redact import redact

log = logging.getLogger(__name__)

HEARTBEAT_PREFIX = "bottler.heartbeat"
FEEDBACK_EVERY = 2000  # messages between Kafka polls / feedback while busy
PG_EPOCH_MICROS = 946_684_800_000_000  # 2000-01-01 (PostgreSQL's epoch) in Unix microseconds
FEEDBACK_INTERVAL = 1.0  # seconds: the slow path to the server for a confirmed position
KEEPALIVE_INTERVAL = 5.0  # seconds: a replayed transaction still answers the server this often
TABLE_SCAN_INTERVAL = 2.0  # seconds between looks for tables that joined (a catalog query)


class Streamer:
    def __init__(
        self,
        dsn: str,
        slot: str,
        publications: list[str],
        tables: Tables,
        control: ControlEvents,
        publisher: Publisher,
        admin: AdminClient,
        heartbeats: psycopg.Connection,
        heartbeat_interval: float,
        transaction_topic: bool,
        watcher: Watcher | None = None,
        progress: CaptureState | None = None,
        chunk_rows: int = 10_000,
        spool_dir: Callable[[str], Path] | None = None,
    ):
        """``spool_dir``: stream large transactions while they run (pgoutput protocol 2+,
        where the server has it), staged until they commit (capture/stream/spool.py) in the
        directory it gives for the server's system identifier; None: protocol 1, each transaction
        sent by the server at its commit."""
        self.dsn = dsn
        self.slot = slot
        self.publications = publications
        self.watcher = watcher  # keeps the capture's own publications exact (None: the user's)
        self.progress = progress
        self._scanned_at = 0.0
        self.tables = tables
        self.control = control
        self.publisher = publisher
        self.tracker = publisher.tracker
        self.admin = admin
        self.heartbeats = heartbeats  # a plain autocommit connection to emit heartbeats
        self.heartbeat_interval = heartbeat_interval
        self.transaction_topic = transaction_topic
        # unkeyed tables refused by --on-error: each of their rows follows it too
        self._skipped_relations: dict[int, pgoutput.Relation] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self._feedback_at = 0.0
        self._batch = None
        self._begin: pgoutput.Begin | None = None
        self._last_heartbeat = 0.0
        self.confirmed_sent = 0
        self._lsn = 0  # the WAL position of the message being handled
        self._commit_time = b""  # its transaction's, as a header value
        # Tables re-published in chunks between the stream's transactions (new ones, requests).
        self.incremental = IncrementalSnapshots(dsn, slot, tables, publications, progress,
                                                chunk_rows, publisher.data_error,
                                                publisher.at_risk)
        self.drift = Drift(tables.catalog, publications, tables)
        self._drift_at = 0.0
        self.spool_dir = spool_dir
        self.spool: Spool | None = None  # the streamed transactions not committed yet
        self._block_xid: int | None = None  # between Stream Start and Stream Stop: its xid
        self._cur = None
        self._keepalive_at = 0.0

    def run(self, stop: threading.Event) -> None:
        conn = replication_connect(self.dsn)
        cur = self._cur = conn.cursor()
        options = {"proto_version": "1", "messages": "true",
                   "publication_names": ",".join(_quoted(p) for p in self.publications)}
        version = streaming_protocol(conn.server_version) if self.spool_dir else None
        if version:
            options |= {"proto_version": str(version), "streaming": "on"}
            cur.execute("IDENTIFY_SYSTEM")
            try:
                self.spool = Spool(self.spool_dir(cur.fetchone()[0]))
            except BaseException:
                conn.close()
                raise
        try:
            cur.start_replication(
                slot_name=self.slot, decode=False, status_interval=10, options=options)
        except psycopg2.Error as exc:
            conn.close()
            if self.spool is not None:
                self.spool.close()
            if slot_safety.lost_while_streaming(self.dsn, self.slot, exc):
                raise slot_safety.lost_slot_error(self.slot) from None
            raise BottlerError(
                f"cannot stream from replication slot {self.slot}: "
                f"{str(exc).strip().splitlines()[0]}",
                "another process may hold the slot (bottler slot status): stop it or choose "
                "another --slot",
            ) from None
        log.info("streaming from slot %s (publication %s, pgoutput protocol %s%s)", self.slot,
                 ", ".join(self.publications), options["proto_version"],
                 ", large transactions streamed while they run" if version else "")
        handled = 0
        incremental = self.incremental
        try:
            incremental.load()
            while not stop.is_set():
                msg = cur.read_message()
                if msg is not None:
                    self._lsn = msg.data_start
                    if self._block_xid is None:
                        self.handle(pgoutput.parse(msg.payload))
                    else:
                        self._staged(msg.payload)
                    handled += 1
                    if handled % FEEDBACK_EVERY == 0:
                        self.publisher.poll(0)
                        self._feedback(cur)
                    if self._batch is None and incremental.queue and incremental.due():
                        incremental.read_chunk()
                    continue
                self.publisher.poll(0)
                self._feedback(cur)
                self._maybe_heartbeat()
                self._maybe_scan_tables()
                self._maybe_check_drift(max(self._lsn, cur.wal_end))
                if self._batch is None and incremental.due():
                    incremental.read_chunk()
                    continue
                select.select([conn], [], [], 0.1)
            self.publisher.flush()
            self._feedback(cur, force=True)
            incremental.close()
        except (psycopg2.Error, psycopg.Error) as exc:
            if slot_safety.lost_while_streaming(self.dsn, self.slot, exc):
                raise slot_safety.lost_slot_error(self.slot) from None
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BottlerError(
                f"lost the connection to PostgreSQL while streaming: {redact(reason)}",
                "the server may be restarting or gone: run the capture again once it is up; it "
                "resumes from the slot's confirmed position, nothing is lost",
            ) from None
        finally:
            conn.close()
            if self.spool is not None:
                self.spool.close()  # what was not committed is streamed again to the next run

    # -- feedback --------------------------------------------------------------------------
    def _feedback(self, cur, force: bool = False) -> None:
        if self._batch is None and not (self.spool and self.spool.open):
            # Outside a transaction everything read is handled, and wal_end is the position
            # up to which the server has sent WAL (a keepalive's): an idle slot advances past
            # other databases' WAL, so retained WAL stays bounded. Not while a streamed
            # transaction waits for its commit: the server keeps its WAL anyway (its restart
            # position stays before the transaction's start), so waiting costs nothing.
            self.tracker.idle_at(cur.wal_end)
        now = time.monotonic()
        confirmed = self.tracker.confirmed()
        due = force or now - self._feedback_at >= FEEDBACK_INTERVAL
        if confirmed != self.confirmed_sent and due:
            # force: psycopg2 would otherwise wait for its status interval (10 s) to send it
            cur.send_feedback(flush_lsn=confirmed, write_lsn=confirmed, force=True)
            self.confirmed_sent, self._feedback_at = confirmed, now
            metrics.CONFIRMED_LSN.set(confirmed)
            self.incremental.confirmed(confirmed)
        metrics.IN_FLIGHT.set(self.tracker.in_flight)
        metrics.LAG_BYTES.set(max(cur.wal_end - confirmed, 0))

    def _maybe_heartbeat(self) -> None:
        due = time.monotonic() - self._last_heartbeat >= self.heartbeat_interval
        if self.heartbeats is None or not due:
            return
        self._last_heartbeat = time.monotonic()
        try:
            self.heartbeats.execute(
                "select pg_logical_emit_message(false, %s, now()::text)", (HEARTBEAT_PREFIX,)
            )
        except psycopg.errors.InsufficientPrivilege:
            self.heartbeats = None
            log.warning("this role may not call pg_logical_emit_message: heartbeats are off; "
                        "the slot still advances on the server's keepalives")

    # -- tables joining the publication -----------------------------------------------------
    def _maybe_scan_tables(self) -> None:
        """New tables (and tables whose replica identity changed) join the capture's
        publications. Their rows committed before they joined are not in the stream: an
        incremental snapshot publishes them, interleaved with the stream."""
        if self.watcher is None or self._batch is not None:
            return
        now = time.monotonic()
        if now - self._scanned_at < TABLE_SCAN_INTERVAL:
            return
        self._scanned_at = now
        joined = self.watcher.changes()
        if joined:
            self.incremental.request([c.oid for c in joined], "it joined the capture")

    # -- DDL that no row change followed ----------------------------------------------------
    def _maybe_check_drift(self, streamed: int) -> None:
        """Between transactions: a table whose catalog changed with no Relation message since
        (capture/stream/drift.py) is taken from the catalog, and published again if need be; so is
        one using an enum type whose value was renamed (no Relation message says that)."""
        now = time.monotonic()
        if self._batch is not None or now - self._drift_at < TABLE_SCAN_INTERVAL:
            return
        self._drift_at = now
        for oid in self.drift.check(streamed):
            try:
                found = describe_oids(self.tables.catalog, [oid])
                why = self.tables.described(found[0]) if found else None
            except UnkeyedTable:
                continue  # its next change says so, as --on-error has it
            except BottlerError as exc:  # no longer readable: its snapshot would say the same
                log.warning("%s", exc.message)
                continue
            if why:
                self._republish(oid, why)
        for oid, why in self.tables.relabeled():
            self._republish(oid, why)

    # -- messages --------------------------------------------------------------------------
    def handle(self, m) -> None:
        kind = type(m)
        if kind is pgoutput.Insert:
            self._change(m.relation_oid, m.new, m.new, "insert")
        elif kind is pgoutput.Update:
            self._update(m)
        elif kind is pgoutput.Delete:
            self._change(m.relation_oid, m.old, None, "delete")
        elif kind is pgoutput.Begin:
            self._begin = m
            self._commit_time = b"%d" % (m.commit_time + PG_EPOCH_MICROS)
            self._batch = self.tracker.open()
            if self.transaction_topic:
                self._send(self.control.transactions_topic, None,
                           self.control.transaction("BEGIN", m.xid, m.final_lsn, m.commit_time))
        elif kind is pgoutput.Commit:
            if self.transaction_topic:
                self._send(self.control.transactions_topic, None,
                           self.control.transaction("COMMIT", self._begin.xid, m.end_lsn,
                                                    m.commit_time))
            self.tracker.seal(self._batch, m.end_lsn)
            self._batch = None
            self.incremental.committed(m.end_lsn)
            self._publish_counts()
            self._maybe_scan_tables()  # a busy stream is seldom idle: between transactions
            self._maybe_check_drift(self._lsn)
        elif kind is pgoutput.Relation:
            self._relation(m)
        elif kind is pgoutput.Truncate:
            self._truncate(m)
        elif kind is pgoutput.Message:
            self._message(m)
        elif kind is pgoutput.StreamStart:
            self._block_xid = m.xid
        elif kind is pgoutput.StreamCommit:
            self._stream_commit(m)
        elif kind is pgoutput.StreamAbort:
            self.spool.abort(m.xid, m.subxid)
            metrics.SPOOLED_BYTES.set(self.spool.bytes)
        # Type and Origin messages need nothing: types are read from the catalog by oid.

    # -- streamed transactions (protocol 2+) ----------------------------------------------------
    def _staged(self, payload: bytes) -> None:
        """A message between Stream Start and Stream Stop: a change (or relation) of the open
        transaction, staged as it came until the transaction commits."""
        if payload[0] == pgoutput.STREAM_STOP:
            self.spool.block_end(self._block_xid)
            self._block_xid = None
            metrics.SPOOLED_BYTES.set(self.spool.bytes)
            return
        subxid = pgoutput.streamed_xid(payload)
        if subxid is not None:  # the Origin after a first Stream Start carries none
            self.spool.append(self._block_xid, subxid, self._lsn, payload)

    def _stream_commit(self, m: pgoutput.StreamCommit) -> None:
        """The staged transaction, replayed as the ordinary transaction it is, at its commit's
        place in the stream: published, and confirmed behind Kafka's acknowledgements."""
        self.handle(pgoutput.Begin(m.lsn, m.commit_time, m.xid))
        for n, (lsn, data) in enumerate(self.spool.commit(m.xid), 1):
            self._lsn = lsn
            self.handle(pgoutput.parse_streamed(data)[1])
            if n % FEEDBACK_EVERY == 0:
                self.publisher.poll(0)
                self._keepalive()
        self._lsn = m.lsn
        self.handle(pgoutput.Commit(m.flags, m.lsn, m.end_lsn, m.commit_time))
        metrics.SPOOLED_BYTES.set(self.spool.bytes)

    def _keepalive(self) -> None:
        """While a large transaction is replayed no message is read: tell the server the
        capture lives (else it ends the connection after wal_sender_timeout)."""
        now = time.monotonic()
        if now - self._keepalive_at >= KEEPALIVE_INTERVAL:
            self._cur.send_feedback(force=True)  # the positions sent before: they only grow
            self._keepalive_at = now

    def _relation(self, m: pgoutput.Relation) -> None:
        try:
            why = self.tables.relation(m)
        except UnkeyedTable as exc:
            mode = self.publisher.policy.on_error.mode
            if mode == "exit":
                self.publisher.data_error(DataError(str(exc)))  # raises
            log.error("%s; its rows follow --on-error=%s", exc.message, mode)
            self._skipped_relations[m.oid] = m
        else:
            self._skipped_relations.pop(m.oid, None)  # it has a key now
            if why:
                self._republish(m.oid, why)

    def _republish(self, oid: int, why: str) -> None:
        """DDL changed rows the WAL does not bring again (capture/stream/schema_changes.py): the
        table is published again, interleaved with the stream."""
        codec = self.tables.by_oid(oid)
        if codec.keyed:
            self.incremental.request([oid], why, restart=True)
            return
        # An unkeyed table's topic keeps every row it is sent: a copy would double them.
        log.warning("%s: %s; it has no key, so its rows are not published again: the rows "
                    "already in the views keep what they held", codec.qualified, why)

    def _change(self, oid: int, key_values, values, op: str) -> None:
        if oid in self._skipped_relations:
            self._refused_row(self._skipped_relations[oid], key_values, values, op)
            return
        codec = self.tables.by_oid(oid)
        if values is None and not codec.keyed:
            return  # deletes of unkeyed tables are not published (documented)
        try:
            key = codec.key(key_values)
            value = None if values is None else codec.value(values)
        except DataError as error:
            error.row, error.batch = self._row(codec, key_values, values, op), self._batch
            self.publisher.data_error(error)
            return
        # Where the change is in the WAL: per key, changes come in increasing LSN (a row's
        # writers wait for each other's commits), so a consumer can tell a replayed old
        # change from a new one (the translators' keyed state does).
        headers = [("bottler.lsn", b"%d" % self._lsn), ("bottler.commit_time", self._commit_time)]
        row = None
        if self.publisher.at_risk(key, value):  # Kafka may refuse it: kept for a dead letter
            row = self._row(codec, key_values, values, op)
        self.publisher.send(codec.topic, key, value, self._batch, headers, row)
        if oid in self.incremental.oids and key is not None:
            self.incremental.touched(oid, key, self._begin.xid)
        self._count(codec.qualified, op)

    def _row(self, codec, key_values, values, op: str) -> Row:
        """The change as PostgreSQL sent it, for its dead letter."""
        return Row.of(codec.spec, key_values if values is None else values, op, self._lsn,
                      self._commit_time)

    def _refused_row(self, m: pgoutput.Relation, key_values, values, op: str) -> None:
        """A row of a table the capture refused (no key): it follows --on-error as well."""
        error = DataError(f"table {m.namespace}.{m.name} has no primary key or replica-identity "
                          "index, and --allow-unkeyed is off")
        error.row = Row(f"{m.namespace}.{m.name}", None, tuple(c.name for c in m.columns), (),
                        key_values if values is None else values, op, self._lsn,
                        self._commit_time)
        error.batch = self._batch
        self.publisher.data_error(error)

    def _update(self, m: pgoutput.Update) -> None:
        new = m.new
        if UNCHANGED in new:
            if m.old is None or m.old_is_key:
                if m.relation_oid in self._skipped_relations:
                    self._change(m.relation_oid, new, new, "update")
                    return
                codec = self.tables.by_oid(m.relation_oid)
                error = DataError(
                    f"an update of {codec.qualified} left TOASTed columns untouched and the "
                    "table does not have REPLICA IDENTITY FULL, so the complete row is not in "
                    f"the WAL; run ALTER TABLE {codec.qualified} REPLICA IDENTITY FULL"
                )
                error.row, error.batch = self._row(codec, new, new, "update"), self._batch
                self.publisher.data_error(error)
                return
            new = tuple(o if n is UNCHANGED else n for n, o in zip(new, m.old, strict=True))
        if m.old is not None and m.relation_oid not in self._skipped_relations:
            codec = self.tables.by_oid(m.relation_oid)
            if codec.keyed and codec.key(m.old) != codec.key(new):
                self._change(m.relation_oid, m.old, None, "delete")  # the old key is gone
        self._change(m.relation_oid, new, new, "update")

    def _count(self, table: str, op: str) -> None:
        # Counted here and added to the metric once per transaction: the metric takes a lock.
        self._counts[(table, op)] = self._counts.get((table, op), 0) + 1

    def _publish_counts(self) -> None:
        for (table, op), n in self._counts.items():
            metrics.EVENTS.labels(table, op).inc(n)
        self._counts.clear()

    def _truncate(self, m: pgoutput.Truncate) -> None:
        self.publisher.flush()  # so the topics' end offsets include every earlier change
        for oid in m.relation_oids:
            if oid in self._skipped_relations:
                continue
            codec = self.tables.by_oid(oid)
            self.incremental.truncated(oid)
            schema, table = codec.spec.qualified
            event = self.control.truncate(
                codec.topic, schema, table, self._begin.final_lsn, self._begin.commit_time,
                topics.end_offsets(self.admin, codec.topic), m.cascade, m.restart_identity,
            )
            self._send(self.control.truncate_topic, codec.topic.encode(), event)
            self._count(codec.qualified, "truncate")
        self._publish_counts()

    def _message(self, m: pgoutput.Message) -> None:
        if m.prefix == WATERMARK_PREFIX and m.transactional:
            for topic, key, value, row in self.incremental.watermark(m.content):
                self.publisher.send(topic, key, value, self._batch, row=row)
            return
        if m.prefix == SIGNAL_PREFIX and m.transactional:
            self.incremental.signal(m.content)
            return
        if m.prefix != HEARTBEAT_PREFIX:
            return  # another tool's message (a migration's fence, say)
        event = self.control.heartbeat(self.slot, m.lsn, m.content.decode())
        if m.transactional:
            self._send(self.control.heartbeat_topic, None, event)
            return
        batch, self._batch = self._batch, self.tracker.open()  # it stands alone
        self._send(self.control.heartbeat_topic, None, event)
        self.tracker.seal(self._batch, m.lsn)
        self._batch = batch

    def _send(self, topic: str, key: bytes | None, value: bytes | None,
              headers: list[tuple[str, bytes]] | None = None) -> None:
        self.publisher.send(topic, key, value, self._batch, headers)


def streaming_protocol(server_version: int) -> int | None:
    """The newest pgoutput protocol of a server (``server_version_num``) that streams
    in-progress transactions: 2 on 14, 3 (two-phase) on 15, 4 (parallel apply) on 16 on; None
    before 14."""
    if server_version >= 160000:
        return 4
    if server_version >= 150000:
        return 3
    return 2 if server_version >= 140000 else None


def _quoted(name: str) -> str:
    """A publication name as pgoutput's publication_names list reads it."""
    return '"' + name.replace('"', '""') + '"'

