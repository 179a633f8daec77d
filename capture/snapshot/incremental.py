"""Incremental snapshots while streaming: one table re-published in key-ordered chunks interleaved
with the live stream, the watermark technique of Netflix's DBLog.

For each chunk: a low watermark goes into the WAL (``pg_logical_emit_message``), the chunk is
read by key range inside a snapshot, and a high watermark follows. The rows wait in memory. The
stream, which reads those watermarks in commit order, drops from the chunk every key that a
change between the two watermarks touches (that change is newer than, or equal to, the chunk's
row, and the stream publishes it); at the high watermark every transaction the chunk's snapshot
saw has been streamed, so the remaining rows are published there, in the high watermark's
transaction: never an older row image after a newer one, and the stream never stops for more
than one chunk's read.

One more rule closes a gap of the plain technique on PostgreSQL: a transaction's commit record
reaches the WAL (and the stream) slightly before the transaction becomes visible to new
snapshots, so a transaction streamed before the low watermark may still be invisible to the
chunk's snapshot. Its keys are dropped too: the stream remembers which keys recent transactions
touched, and the chunk's snapshot (``pg_current_snapshot()``) says which of them it did not see.

Progress (the last key published, per table) is kept in the `_bottler.capture` topic under
``<slot>/incremental/<schema>.<table>``, recorded only once PostgreSQL was told the high
watermark's transaction is confirmed (so every row before it is in Kafka): a restart goes on
from the last recorded chunk, republishing at most the chunks in flight.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from capture.health import metrics
from capture.publish.encoding import TableCodec, Unencodable
from capture.publish.errors import DataError
from capture.publish.row import Row
from capture.setup.state import CaptureState
from capture.snapshot.exported import Chunk
from capture.source import standby
from capture.source.database import SourceTable, describe_oids, session_connect
from capture.stream.tables import Tables, UnkeyedTable

log = logging.getLogger(__name__)

SIGNAL_PREFIX = "bottler.signal"  # requests: {"type": "snapshot", "slot": ..., "table": ...}
WATERMARK_PREFIX = "bottler.watermark"  # {"id": ..., "mark": "low" | "high"}
ROWS_PER_PAGE = 50  # unkeyed tables are read by page ranges: pages per chunk = rows / this
LOG_EVERY = 50  # chunks between progress lines


@dataclass
class Request:
    """A table to snapshot, and how far it got."""

    oid: int
    table: str  # schema.table, for logs and the progress key
    position: list[str] | int | None = None  # keyed: the last key published (text values);
    # unkeyed: the next page; None: from the start
    rows: int = 0
    chunks: int = 0
    again: bool = False  # started over while a chunk was out: that chunk does not advance it
    since: float = field(default_factory=time.time)  # requests run in the order they came
    until: list[str] | None = None  # keyed: the largest key when the first chunk was read;
    # rows above it were inserted later, so the stream has them (the snapshot does not chase them)

    def state(self) -> dict:
        return {"oid": self.oid, "table": self.table, "position": self.position,
                "rows": self.rows, "chunks": self.chunks, "since": self.since,
                "until": self.until}


@dataclass
class Window:
    """A chunk read and waiting for its high watermark."""

    id: str
    request: Request
    codec: TableCodec
    rows: dict  # key (an index for unkeyed tables) -> value, in key order
    at_risk: dict  # key -> Row, for values Kafka may refuse for their size (their dead letter)
    position: list[str] | int | None  # the request's position once the chunk is published
    last: bool  # the table's last chunk
    xmin: int
    xmax: int
    xip: frozenset[int]
    opened: bool = False  # the low watermark was streamed

    def visible(self, xid: int) -> bool:
        """Whether the chunk's snapshot saw transaction ``xid`` (32 bits, as streamed)."""
        full = _widen(xid, self.xmax)
        return full < self.xmax and full not in self.xip


class IncrementalSnapshots:
    def __init__(self, dsn: str, slot: str, tables: Tables, publications: list[str],
                 progress: CaptureState | None, chunk_rows: int,
                 data_error: Callable[[DataError], None],
                 at_risk: Callable[[bytes | None, bytes | None], bool] = lambda k, v: False,
                 generated: bool = False, primary: str | None = None):
        self.dsn = dsn
        self.primary = primary  # a standby source's primary: the watermarks are written there
        self.slot = slot
        self.tables = tables
        self.publications = publications
        self.progress = progress
        self.chunk_rows = chunk_rows
        self.data_error = data_error
        self.at_risk = at_risk
        self.generated = generated  # the publications publish generated columns (18+)
        self.queue: list[Request] = []
        self.window: Window | None = None
        self.oids: frozenset[int] = frozenset()  # the tables to snapshot: changes are watched
        self._recent: dict[int, set[tuple[int, bytes]]] = {}  # xid -> (table, key) it changed
        self._closing: list[tuple[str, dict | None]] = []  # records of the open transaction
        self._unconfirmed: deque[tuple[int, str, dict | None]] = deque()  # (lsn, key, state)
        self._conns: dict[str, psycopg.Connection] = {}  # by DSN: the source's, the primary's
        self._paused_until = 0.0  # a chunk met columns the stream has not described yet

    # -- requests ---------------------------------------------------------------------------
    def load(self) -> None:
        """The requests recorded before the last stop, and tables that were joining then (an
        earlier version's whole-table copies, `<slot>/copies`) as new requests."""
        if self.progress is None:
            return
        recorded = self.progress.read_all()
        prefix = f"{self.slot}/incremental/"
        self.queue = sorted(
            (Request(v["oid"], v["table"], v.get("position"), v.get("rows", 0),
                     v.get("chunks", 0), v.get("since", 0), v.get("until"))
             for k, v in recorded.items() if k.startswith(prefix)),
            key=lambda r: r.since)
        for r in self.queue:
            log.info("resuming the incremental snapshot of %s after %d rows", r.table, r.rows)
        copies = recorded.get(f"{self.slot}/copies") or {}
        if copies.get("tables"):
            self.request(copies["tables"], "it joined the capture before the last stop")
        if f"{self.slot}/copies" in recorded:
            self.progress.forget([f"{self.slot}/copies"])
        self._watch()

    def request(self, oids: list[int], why: str, restart: bool = False) -> None:
        """Snapshot these tables (recorded before returning: a crash cannot lose a request).
        ``restart``: one already under way starts over (the rows it published are stale)."""
        with session_connect(self.primary or self.dsn) as conn:  # a standby may lag: the
            found = describe_oids(conn, oids, self.generated)  # primary knows a new table
        for table in found:
            running = next((r for r in self.queue if r.oid == table.oid), None)
            if running is not None and restart:
                running.position = running.until = None
                running.rows = running.chunks = 0
                if self.window is not None and self.window.request is running:
                    self.window.rows.clear()  # read before the change: the new start has them
                    running.again = True
                self._record(running, durable=True)
                log.info("incremental snapshot of %s starts over: %s", table.qualified, why)
                continue
            if running is not None:
                log.info("%s: an incremental snapshot of it is already under way", table.qualified)
                continue
            r = Request(table.oid, table.qualified)
            self.queue.append(r)
            self._record(r, durable=True)
            log.info("incremental snapshot of %s requested: %s", table.qualified, why)
        self._watch()

    def signal(self, content: bytes) -> None:
        """A `bottler capture snapshot` request from the WAL; those for other slots (every slot
        of the database reads it) and of unknown types are ignored."""
        try:
            message = json.loads(content)
            kind, slot, table = message["type"], message["slot"], message["table"]
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a %s message that is not a request: %r", SIGNAL_PREFIX,
                        content[:200])
            return
        if slot != self.slot:
            return
        if kind != "snapshot":
            log.warning("ignored a request of unknown type %r", kind)
            return
        with session_connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                "select c.oid from pg_publication_tables p "
                "join pg_namespace n on n.nspname = p.schemaname "
                "join pg_class c on c.relnamespace = n.oid and c.relname = p.tablename "
                "where p.pubname = any(%s) and c.oid = to_regclass(%s)",
                (self.publications, table)).fetchone()
        if row is None:
            log.warning("ignored the request to snapshot %s: the capture of slot %s does not "
                        "capture it (publication %s)", table, self.slot,
                        ", ".join(self.publications))
            return
        self.request([row[0]], "bottler capture snapshot")

    # -- the stream's hooks -------------------------------------------------------------------
    def due(self) -> bool:
        """A chunk may be read (the stream is between transactions)."""
        return (bool(self.queue) and self.window is None
                and time.monotonic() >= self._paused_until)

    def read_chunk(self) -> None:
        """Low watermark, the chunk (in a snapshot), high watermark."""
        request = self.queue[0]
        conn = self._connect()
        window_id = uuid.uuid4().hex
        low = self._emit(window_id, "low")
        if self.primary:  # the chunk's snapshot must come after the low watermark, as on a primary
            standby.wait_replayed(conn, low, "the incremental snapshot's low watermark")
        conn.execute("begin isolation level repeatable read read only")
        try:
            snapshot = conn.execute("select pg_current_snapshot()::text").fetchone()[0]
            found = describe_oids(conn, [request.oid], self.generated)
            window = self._read(conn, request, found[0], window_id, snapshot) if found else None
            gone = "it is gone (dropped?)"
        except UnkeyedTable:
            window, gone = None, "it has no key any more (and --allow-unkeyed is off)"
        except psycopg.errors.UndefinedColumn as exc:
            # DDL the stream has not described yet (a rename): its Relation message, or the
            # catalog's drift check, brings the new columns, and the snapshot starts over then
            conn.execute("rollback")
            log.info("incremental snapshot of %s waits for its new columns: %s", request.table,
                     str(exc).splitlines()[0])
            self._paused_until = time.monotonic() + 1.0
            return
        finally:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.execute("commit")
        if window is None:
            log.warning("the incremental snapshot of %s ends: %s", request.table, gone)
            self._finish(request, durable=True)
            return
        self._emit(window_id, "high")
        # Transactions streamed before this read that its snapshot did not see (see above).
        for xid, keys in self._recent.items():
            if not window.visible(xid):
                for oid, key in keys:
                    if oid == request.oid:
                        window.rows.pop(key, None)
        self._recent = {x: k for x, k in self._recent.items()
                        if _widen(x, window.xmax) >= window.xmin}
        self.window = window

    def touched(self, oid: int, key: bytes, xid: int) -> None:
        """A streamed change of a table to snapshot: a chunk row with its key is older."""
        self._recent.setdefault(xid, set()).add((oid, key))
        w = self.window
        if w is not None and w.request.oid == oid and (w.opened or not w.visible(xid)):
            w.rows.pop(key, None)

    def truncated(self, oid: int) -> None:
        """The table was emptied: the chunk waiting holds rows older than that."""
        if self.window is not None and self.window.request.oid == oid:
            self.window.rows.clear()

    def watermark(self, content: bytes) -> list[tuple[str, bytes | None, bytes, Row | None]]:
        """A watermark from the stream: at a low one the window opens; at a high one the rows
        to publish now, in the watermark's transaction (committed(), then confirmed(), record
        the progress). Watermarks of other runs and captures are ignored."""
        w = self.window
        try:
            mark = json.loads(content)
        except ValueError:
            return []
        if w is None or mark.get("id") != w.id:
            return []
        if mark.get("mark") == "low":
            w.opened = True
            return []
        self.window = None
        r = w.request
        if r.again:  # its chunk was read before the table changed: start from the top
            r.again, w.position, w.last = False, None, False
        r.position, r.rows, r.chunks = w.position, r.rows + len(w.rows), r.chunks + 1
        metrics.SNAPSHOT_ROWS.labels(r.table).inc(len(w.rows))
        if r.chunks % LOG_EVERY == 0:
            log.info("incremental snapshot of %s: %d chunks, %d rows", r.table, r.chunks, r.rows)
        if w.last:
            log.info("incremental snapshot of %s complete: %d rows in %d chunks", r.table,
                     r.rows, r.chunks)
            self._finish(r)
        else:
            self._closing.append((self._key(r), r.state()))
        return [(w.codec.topic, None if isinstance(k, int) else k, v, w.at_risk.get(k))
                for k, v in w.rows.items()]

    def committed(self, end_lsn: int) -> None:
        """The transaction holding the high watermark committed at ``end_lsn``."""
        if self._closing:
            self._unconfirmed.extend((end_lsn, key, state) for key, state in self._closing)
            self._closing.clear()

    def confirmed(self, lsn: int) -> None:
        """PostgreSQL was told ``lsn`` is confirmed: the chunks up to it are in Kafka."""
        if self.progress is None:
            self._unconfirmed.clear()
            return
        done = {}
        while self._unconfirmed and self._unconfirmed[0][0] <= lsn:
            _, key, state = self._unconfirmed.popleft()
            done[key] = state
        for key, state in done.items():  # the last state per table
            if state is None:
                self.progress.forget([key])
            else:
                self.progress.record(key, **state)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.flush()
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    # -- inside ---------------------------------------------------------------------------------
    def _read(self, conn, request: Request, table: SourceTable, window_id: str,
              snapshot: str) -> Window:
        codec = self.tables.codec_for(table)
        spec = codec.spec
        rows: dict = {}
        at_risk: dict = {}
        if spec.key_columns:
            if request.position is None:
                request.until = self._largest_key(conn, spec, table)
            query, position, last = self._key_range(spec, table, request.position, request.until)
        else:
            query, position, last = self._page_range(conn, spec, table, request.position)
        count = 0
        with conn.cursor().copy(query) as copy:
            copy.set_types(["text"] * len(spec.columns))
            for values in copy.rows():
                count += 1
                try:
                    key = codec.key(values) if spec.key_columns else len(rows)
                    rows[key] = codec.value(values)
                    if self.at_risk(None if isinstance(key, int) else key, rows[key]):
                        at_risk[key] = Row.of(spec, tuple(values), "snapshot")
                except Unencodable as exc:  # the row whole, for a dead letter
                    self.data_error(DataError(  # raises under --on-error=exit
                        str(exc), Row.of(spec, tuple(values), "snapshot")))
                if spec.key_columns:
                    position = [values[i] for i in _positions(spec)]
        if spec.key_columns:
            last = count < self.chunk_rows
        xmin, xmax, xip = snapshot.split(":")
        return Window(window_id, request, codec, rows, at_risk, position, last, int(xmin),
                      int(xmax), frozenset(int(x) for x in xip.split(",") if x))

    def _key_range(self, spec, table: SourceTable, after: list[str] | None,
                   until: list[str] | None):
        """The next ``chunk_rows`` rows in key order, after the last key published, up to the
        largest key there was."""
        columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in spec.columns)
        keys = sql.SQL(", ").join(sql.Identifier(k) for k in spec.key_columns)
        types = {c.name: c.formatted for c in spec.columns}

        def key(values: list[str]) -> sql.Composed:
            return sql.SQL(", ").join(
                sql.SQL("{}::{}").format(sql.Literal(v), sql.SQL(types[k]))
                for k, v in zip(spec.key_columns, values, strict=True))

        where = [sql.SQL("({}) <= ({})").format(keys, key(until))] if until else []
        if after is not None:
            where.append(sql.SQL("({}) > ({})").format(keys, key(after)))
        condition = sql.SQL(" where ") + sql.SQL(" and ").join(where) if where else sql.SQL("")
        query = sql.SQL("copy (select {} from {}{} order by {} limit {}) to stdout").format(
            columns, table.ident, condition, keys, sql.Literal(self.chunk_rows))
        return query, after, False

    def _largest_key(self, conn, spec, table: SourceTable) -> list[str] | None:
        keys = [sql.Identifier(k) for k in spec.key_columns]
        # aliased: ORDER BY a name would take an output column of that name, the text
        row = conn.execute(sql.SQL("select {} from {} order by {} limit 1").format(
            sql.SQL(", ").join(sql.SQL("{}::text as {}").format(k, sql.Identifier(f"k{i}"))
                               for i, k in enumerate(keys)), table.ident,
            sql.SQL(", ").join(sql.SQL("{} desc").format(k) for k in keys))).fetchone()
        return None if row is None else list(row)

    def _page_range(self, conn, spec, table: SourceTable, first: int | None):
        """An unkeyed table's next pages (nothing to deduplicate on: its topic keeps every
        row it is sent, as the initial snapshot's copy does)."""
        first = first or 0
        pages = conn.execute(
            "select pg_relation_size(%s) / current_setting('block_size')::int",
            (table.oid,)).fetchone()[0]
        size = max(1, self.chunk_rows // ROWS_PER_PAGE)
        chunk = Chunk(table.qualified, table.qualified, spec, first, first + size)
        return chunk.query(), first + size, first + size >= pages

    def _emit(self, window_id: str, mark: str) -> str:
        """Write a watermark (on the primary, a standby being read-only); return the WAL
        position after its commit."""
        conn = self._connect(self.primary)
        conn.execute("select pg_logical_emit_message(true, %s, %s)",
                     (WATERMARK_PREFIX, json.dumps({"id": window_id, "mark": mark})))
        return standby.written(conn) if self.primary else ""

    def _connect(self, dsn: str | None = None) -> psycopg.Connection:
        """The kept connection to ``dsn`` (the source's by default)."""
        conn = self._conns.get(dsn := dsn or self.dsn)
        if conn is None or conn.closed:
            conn = self._conns[dsn] = session_connect(dsn, autocommit=True)
        return conn

    def _finish(self, request: Request, durable: bool = False) -> None:
        self.queue.remove(request)
        if durable:
            if self.progress is not None:
                self.progress.forget([self._key(request)])
        else:
            self._closing.append((self._key(request), None))
        self._watch()

    def _record(self, request: Request, durable: bool = False) -> None:
        if self.progress is not None:
            if durable:
                self.progress.write(self._key(request), **request.state())
            else:
                self.progress.record(self._key(request), **request.state())

    def _key(self, request: Request) -> str:
        return f"{self.slot}/incremental/{request.table}"

    def _watch(self) -> None:
        self.oids = frozenset(r.oid for r in self.queue)
        if not self.oids:
            self._recent.clear()


def _positions(spec) -> list[int]:
    names = [c.name for c in spec.columns]
    return [names.index(k) for k in spec.key_columns]


def _widen(xid: int, ref: int) -> int:
    """A 32-bit transaction id as the 64-bit one nearest ``ref`` (pg_current_snapshot's are
    64-bit, the stream's 32)."""
    full = (ref & ~0xFFFFFFFF) | xid
    if full > ref + 2**31:
        full -= 2**32
    elif full < ref - 2**31:
        full += 2**32
    return full
