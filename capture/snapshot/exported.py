"""The initial snapshot: every published table copied inside the slot's exported snapshot, so the
stream that follows starts exactly where the copy ends. Big tables are split into ctid ranges
and copied in parallel by worker processes that each import the same snapshot."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass, replace

import psycopg
from psycopg import sql

from capture.health import metrics
from capture.publish.dead_letters import ErrorPolicy, OnError
from capture.publish.encoding import CodecSpec, Unencodable
from capture.publish.errors import DataError
from capture.publish.publisher import Publisher
from capture.publish.row import Row
from capture.setup.state import CaptureState, SnapshotRecords
from capture.source.database import SourceTable, session_connect
from common import gctune, seedlock
from common.children import die_with_parent
from common.errors import BottlerError
from common.redact import redact

log = logging.getLogger(__name__)

PROGRESS_EVERY = 5000  # rows between progress reports from a worker
# Progress is recorded this many times per chunk (see _copy_chunk): what a killed capture
# publishes again is at most a piece per worker, and each record costs a pause of a round trip
# or two (the piece's acknowledgements, then the record's).
PIECES = 4
# On a stop, how long workers may take to finish (and record) the piece in hand before they
# are ended: a piece ended earlier is published again by the next run.
STOP_GRACE = 2.0
# While a replica's seed copies from the source (common.seedlock), the workers wait: they look
# for one every YIELD_CHECK seconds of copying, and then every YIELD_WAIT seconds until it ends.
YIELD_CHECK = 0.5
YIELD_WAIT = 0.2


@dataclass(frozen=True)
class Chunk:
    id: str  # stable across restarts of the same snapshot: `table@filenode#index`
    table: str  # qualified name, for progress
    spec: CodecSpec
    first_page: int
    end_page: int | None  # None: to the end of the table
    pieces: tuple[int, ...] = ()  # pages inside the chunk where its progress is recorded

    def ranges(self) -> list[tuple[int, int | None]]:
        """The chunk's pieces, as [first, end) page ranges: each is copied, then recorded."""
        bounds = (self.first_page, *self.pieces, self.end_page)
        return list(zip(bounds, bounds[1:], strict=False))

    def resumed(self, page: int) -> Chunk:
        """The rest of the chunk, when its rows before ``page`` are in Kafka already."""
        if not self.first_page < page < (self.end_page or 2**63):
            return self
        return replace(self, first_page=page, pieces=tuple(b for b in self.pieces if b > page))

    def query(self, piece: tuple[int, int | None] | None = None) -> sql.Composed:
        """COPY of the chunk's rows, or of one piece's."""
        first, end = piece or (self.first_page, self.end_page)
        columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in self.spec.columns)
        if not self.spec.columns:  # a table without columns still has rows
            columns = sql.SQL("")
        where = [sql.SQL("ctid >= {}::tid").format(f"({first},0)")]
        if end is not None:
            where.append(sql.SQL("ctid < {}::tid").format(f"({end},0)"))
        return sql.SQL("copy (select {} from {} where {}) to stdout").format(
            columns, sql.Identifier(*self.spec.qualified), sql.SQL(" and ").join(where)
        )


def plan(
    conn, tables: list[SourceTable], specs: dict[int, CodecSpec], chunk_pages: int,
    layout: dict | None = None, done: set[str] = frozenset(),
) -> tuple[list[Chunk], dict]:
    """Split tables into ranges of ``chunk_pages`` pages (so workers share big tables), each
    copied in PIECES pieces (a restart resumes after the last acknowledged one); return the
    chunks still to copy and the layout that names them.

    ``layout`` (a resumed snapshot's, by table: its file node, pages per chunk and chunk count)
    keeps a table's earlier ranges while its file is the same, so ``done`` chunks are skipped;
    a table whose file changed (rewritten by VACUUM FULL, CLUSTER, TRUNCATE, a type change) has
    rows anywhere now, and is copied whole again."""
    layout = layout or {}
    chunks, new_layout = [], {}
    for t in tables:
        filenode, pages = conn.execute(
            "select pg_relation_filenode(%s), "
            "pg_relation_size(%s) / current_setting('block_size')::int", (t.oid, t.oid)
        ).fetchone()
        before = layout.get(t.qualified)
        if before and before["filenode"] == filenode:
            size, count = before["size"], before["chunks"]
        else:
            size = chunk_pages
            count = len(range(0, max(pages, 1), size))
        new_layout[t.qualified] = {"filenode": filenode, "size": size, "chunks": count}
        piece = -(-size // PIECES)
        for i in range(count):
            chunk_id = f"{t.qualified}@{filenode}#{i}"
            if chunk_id in done:
                continue
            first = i * size
            # The last chunk has no end: a resumed snapshot also finds there the pages the table
            # grew by since it was planned; its pieces go on to the table's end.
            end = (i + 1) * size if i + 1 < count else None
            pieces = tuple(range(first + piece, min(end or pages, pages), piece))
            chunks.append(Chunk(chunk_id, t.qualified, specs[t.oid], first, end, pieces))
    # Largest pieces first, so the tail of the copy is short.
    chunks.sort(key=lambda c: -(c.end_page or 10**12) + c.first_page)
    return chunks, new_layout


def copy_tables(
    dsn: str,
    snapshot: str,
    chunks: list[Chunk],
    estimates: dict[str, int],
    workers: int,
    producer_config: dict,
    on_error: OnError,
    stop: threading.Event,
    records: SnapshotRecords,
) -> dict[str, int] | None:
    """Copy every chunk through ``workers`` processes, which record in ``records`` what Kafka
    acknowledged; return rows published per table, or None when ``stop`` ended it first."""
    yielder = _SeedYield(dsn, report=lambda s: _handle(("yielded", s), set(), {}))
    yielder(stop)  # no worker starts while a seed copies
    yielder.close()
    if stop.is_set():
        log.warning("stop requested: ended the snapshot before it started; the next run"
                    " resumes it")
        return None
    ctx = mp.get_context("spawn")  # the parent holds librdkafka threads: never fork it
    tasks, results, halt = ctx.Queue(), ctx.Queue(), ctx.Event()
    for chunk in chunks:
        tasks.put(chunk)
    count = max(1, min(workers, len(chunks)))
    for _ in range(count):
        tasks.put(None)  # one end marker per worker
    procs = [
        ctx.Process(target=_worker_main, daemon=True, name=f"bottler snapshot worker {i}",
                    args=(os.getpid(), dsn, snapshot, producer_config, on_error, records,
                          tasks, results, halt))
        for i in range(count)
    ]
    remaining = {c.id for c in chunks}
    done: dict[str, int] = dict.fromkeys(estimates, 0)
    started = time.monotonic()
    try:
        # imported here: rich's progress bars take 0.02 s of every start (a seed waits for it)
        from capture.snapshot.bars import snapshot_bars

        with snapshot_bars() as bar:
            tasks_bar = {t: bar.add_task(t, total=max(e, 1)) for t, e in estimates.items()}
            for proc in procs:
                proc.start()
            while remaining:
                if stop.is_set():
                    halt.set()
                    _wind_down(procs, results, remaining, done)
                    log.warning("stop requested: ended the snapshot with %d of %d chunks "
                                "copied; the next run resumes it", len(chunks) - len(remaining),
                                len(chunks))
                    return None
                try:
                    message = results.get(timeout=0.2)
                except queue.Empty:
                    if not any(p.is_alive() for p in procs) and results.empty():
                        codes = sorted({p.exitcode for p in procs})
                        raise BottlerError(
                            f"the snapshot workers ended (exit codes {codes}) with "
                            f"{len(remaining)} chunks not copied",
                            "run the capture again: it resumes the snapshot") from None
                    continue
                _handle(message, remaining, done, bar, tasks_bar)
            for table, task in tasks_bar.items():
                bar.update(task, total=max(done[table], 1), completed=max(done[table], 1))
    finally:
        _end(procs)
        for q in (tasks, results):
            q.cancel_join_thread()  # unread chunks must not hold the exit
            q.close()
    elapsed = time.monotonic() - started
    for table, n in done.items():
        log.info("snapshot %s: %d rows", table, n)
    total = sum(done.values())
    log.info("snapshot: %d rows from %d tables in %.1fs (%.0f rows/s)",
             total, len(done), elapsed, total / elapsed if elapsed else 0)
    return done


def _handle(message, remaining, done, bar=None, tasks_bar=None) -> None:
    kind, *rest = message
    if kind == "rows":
        table, rows = rest
        done[table] = done.get(table, 0) + rows
        if bar and table in tasks_bar:
            bar.update(tasks_bar[table], advance=rows)
        metrics.SNAPSHOT_ROWS.labels(table).set(done[table])
    elif kind == "done":
        remaining.discard(rest[0])
    elif kind == "yielded":
        log.info("snapshot: waited %.1f s for a replica's seed copying from the source",
                 rest[0])
    else:  # "error"
        raise BottlerError(*rest)


def _wind_down(procs, results, remaining, done) -> None:
    """After ``halt``: each worker records the piece in hand and exits. Wait for that up to
    STOP_GRACE seconds (what is recorded is not copied again), reading their reports meanwhile
    (a process cannot exit while what it put in a queue is unread); errors no longer matter.
    A worker still busy then is ended: its records are already durable, so that costs at most
    its piece, copied again by the next run."""
    deadline = time.monotonic() + STOP_GRACE
    while True:
        try:
            message = results.get(timeout=0.05)
        except queue.Empty:
            if not any(p.is_alive() for p in procs) or time.monotonic() > deadline:
                break
            continue
        if message[0] != "error":
            _handle(message, remaining, done)
    _end(procs)


def _end(procs) -> None:
    """Workers still running (a stop, an error) are ended: SIGTERM, then SIGKILL."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + 5
    for proc in procs:
        if proc.pid is None:
            continue
        proc.join(max(0.1, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join()


# -- worker process ----------------------------------------------------------------------------
_worker: dict = {}


def _worker_main(parent, dsn, snapshot, producer_config, on_error, records, tasks, results,
                 halt) -> None:
    die_with_parent(parent)  # a worker never outlives the capture, even one killed -9
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent
    # decides, and ends the workers itself

    policy = ErrorPolicy(on_error, producer_config["bootstrap"], producer_config["extra_config"])
    _worker.update(
        dsn=dsn, snapshot=snapshot, progress=results, records=records, state=records.open(),
        publisher=Publisher(policy=policy, track=False, **producer_config),
        yielder=_SeedYield(dsn),  # a seed that started since the parent looked: at once
    )
    gctune.tune()
    while not halt.is_set() and (chunk := tasks.get()) is not None:
        try:
            if _copy_chunk(chunk, halt):
                results.put(("done", chunk.id))
        except BottlerError as exc:
            results.put(("error", exc.message, exc.hint))
            return
        except Exception as exc:  # noqa: BLE001 - reported by the parent, as one line
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
            results.put(("error", f"the snapshot of {chunk.table} failed: {redact(reason)}",
                         "run the capture again: it resumes the snapshot"))
            return


def _copy_chunk(chunk: Chunk, halt) -> bool:
    """Copy one chunk, piece by piece; False when ``halt`` stopped it between two pieces.

    Each piece is recorded once Kafka acknowledged every row of it (flush), and the next piece
    is sent only once that record is acknowledged too. So whenever and however the capture
    ends, the rows Kafka holds beyond the records are those of the piece in hand: a restart
    publishes again at most one piece (a quarter chunk) per worker, never a whole chunk, and
    never skips a row Kafka does not have. The records are the worker's own (not reported to
    the parent to write): nothing stands between a row's acknowledgement and its record."""
    publisher: Publisher = _worker["publisher"]
    records: SnapshotRecords = _worker["records"]
    state: CaptureState = _worker["state"]
    codec = chunk.spec.codec()
    pieces = chunk.ranges()
    yielder: _SeedYield = _worker["yielder"]
    with session_connect(_worker["dsn"]) as conn:
        conn.execute("begin isolation level repeatable read read only")
        conn.execute(sql.SQL("set transaction snapshot {}").format(_worker["snapshot"]))
        for n, piece in enumerate(pieces, 1):
            yielder(halt)
            rows = reported = 0
            with conn.cursor().copy(chunk.query(piece)) as copy:
                copy.set_types(["text"] * len(chunk.spec.columns))
                for values in copy.rows():
                    try:
                        key, value = codec.key(values), codec.value(values)
                    except Unencodable as exc:
                        publisher.data_error(DataError(  # raises under --on-error=exit
                            str(exc), Row.of(chunk.spec, values, "snapshot")))
                        continue
                    row = None
                    if publisher.at_risk(key, value):  # its text is kept for a dead letter
                        row = Row.of(chunk.spec, values, "snapshot")
                    publisher.send(codec.topic, key, value, row=row)
                    rows += 1
                    if rows - reported >= PROGRESS_EVERY:
                        publisher.poll(0)
                        yielder(halt)
                        _worker["progress"].put(("rows", chunk.table, rows - reported))
                        reported = rows
            publisher.flush()  # the piece counts as copied only once Kafka has all of it
            if n == len(pieces):
                state.write(records.chunk_key(chunk.id), lsn=records.lsn)
            else:
                state.write(records.piece_key(chunk.id), lsn=records.lsn, next_page=piece[1])
            _worker["progress"].put(("rows", chunk.table, rows - reported))
            if halt.is_set() and n < len(pieces):
                return False
        conn.rollback()
    return True


class _SeedYield:
    """Waits while a replica's seed copies from the source (see :mod:`common.seedlock`): called
    often, it looks at most every YIELD_CHECK seconds, on a connection of its own (the worker's
    is busy with its COPY). Not being able to look is no reason to stop the snapshot."""

    def __init__(self, dsn: str, report=None):
        self.dsn = dsn
        self.report = report or (lambda seconds: _worker["progress"].put(("yielded", seconds)))
        self.conn = None
        self.looked = 0.0

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def __call__(self, halt) -> None:
        if time.monotonic() - self.looked < YIELD_CHECK:
            return
        waited = None
        try:
            if self.conn is None:
                self.conn = session_connect(self.dsn, autocommit=True)
            while not halt.is_set() and seedlock.running(self.conn):
                waited = waited or time.monotonic()
                halt.wait(YIELD_WAIT)
        except (BottlerError, psycopg.Error):
            self.close()
        self.looked = time.monotonic()
        if waited is not None:
            self.report(self.looked - waited)
