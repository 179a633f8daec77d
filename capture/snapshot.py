"""The initial snapshot: every published table copied inside the slot's exported snapshot, so the
stream that follows starts exactly where the copy ends. Big tables are split into ctid ranges
and copied in parallel by worker processes that each import the same snapshot."""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from psycopg import sql
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from capture import metrics
from capture.encoding import CodecSpec
from capture.publisher import DataError, Publisher
from capture.source import SourceTable, session_connect
from common import gctune
from common.errors import BottlerError

log = logging.getLogger(__name__)

PAGES_PER_CHUNK = 2000  # ~16 MB of heap: below this a table is copied in one piece
PROGRESS_EVERY = 5000  # rows between progress reports from a worker


@dataclass(frozen=True)
class Chunk:
    table: str  # qualified name, for progress
    spec: CodecSpec
    first_page: int
    end_page: int | None  # None: to the end of the table

    def query(self) -> sql.Composed:
        columns = sql.SQL(", ").join(sql.Identifier(c.name) for c in self.spec.columns)
        if not self.spec.columns:  # a table without columns still has rows
            columns = sql.SQL("")
        where = [sql.SQL("ctid >= {}::tid").format(f"({self.first_page},0)")]
        if self.end_page is not None:
            where.append(sql.SQL("ctid < {}::tid").format(f"({self.end_page},0)"))
        return sql.SQL("copy (select {} from {} where {}) to stdout").format(
            columns, sql.Identifier(*self.spec.qualified), sql.SQL(" and ").join(where)
        )


def plan(conn, tables: list[SourceTable], specs: dict[int, CodecSpec], workers: int) -> list[Chunk]:
    """Split tables into page ranges: big ones in pieces, so workers share them."""
    chunks = []
    for t in tables:
        pages = conn.execute(
            "select pg_relation_size(%s) / current_setting('block_size')::int", (t.oid,)
        ).fetchone()[0]
        size = max(PAGES_PER_CHUNK, -(-pages // (workers * 4)))
        starts = list(range(0, max(pages, 1), size))
        for i, first in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else None
            chunks.append(Chunk(t.qualified, specs[t.oid], first, end))
    # Largest pieces first, so the tail of the copy is short.
    return sorted(chunks, key=lambda c: -(c.end_page or 10**12) + c.first_page)


def copy_tables(
    dsn: str,
    snapshot: str,
    chunks: list[Chunk],
    estimates: dict[str, int],
    workers: int,
    producer_config: dict,
    on_error: str,
) -> dict[str, int]:
    """Copy every chunk through ``workers`` processes; return rows published per table."""
    ctx = mp.get_context("spawn")  # the parent holds librdkafka threads: never fork it
    progress_q = ctx.Queue()
    done: dict[str, int] = dict.fromkeys(estimates, 0)
    started = time.monotonic()
    with _progress() as bar, ProcessPoolExecutor(
        workers, mp_context=ctx, initializer=_init_worker,
        initargs=(dsn, snapshot, producer_config, on_error, progress_q),
    ) as pool:
        tasks = {t: bar.add_task(t, total=max(n, 1)) for t, n in estimates.items()}
        futures = [pool.submit(_copy_chunk, c) for c in chunks]
        while not all(f.done() for f in futures):
            _drain(progress_q, bar, tasks, done, timeout=0.2)
        for f in futures:
            f.result()  # re-raises a worker's error
        _drain(progress_q, bar, tasks, done, timeout=0)
        for table, task in tasks.items():
            bar.update(task, total=max(done[table], 1), completed=max(done[table], 1))
    elapsed = time.monotonic() - started
    for table, n in done.items():
        log.info("snapshot %s: %d rows", table, n)
    total = sum(done.values())
    log.info("snapshot: %d rows from %d tables in %.1fs (%.0f rows/s)",
             total, len(done), elapsed, total / elapsed if elapsed else 0)
    return done


class RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        return Text(f"{task.speed or 0:>9,.0f} rows/s")


def _progress() -> Progress:
    """Live bars on a terminal; elsewhere (logs, CI) the per-table log lines say it."""
    console = Console(stderr=True)
    return Progress(
        TextColumn("snapshot [bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        RateColumn(), TimeElapsedColumn(), console=console, disable=not console.is_terminal,
    )


def _drain(q, bar: Progress, tasks, done: dict[str, int], timeout: float) -> None:
    try:
        while True:
            table, rows = q.get(timeout=timeout)
            done[table] += rows
            bar.update(tasks[table], advance=rows)
            metrics.SNAPSHOT_ROWS.labels(table).set(done[table])
            timeout = 0
    except queue.Empty:
        pass


# -- worker process ----------------------------------------------------------------------------
_worker: dict = {}


def _init_worker(dsn, snapshot, producer_config, on_error, progress_q) -> None:
    def on_data_error(error: DataError) -> None:
        if on_error == "exit":
            raise BottlerError(str(error))
        logging.getLogger(__name__).error("skipped: %s", error)

    _worker.update(
        dsn=dsn, snapshot=snapshot, progress=progress_q,
        publisher=Publisher(on_data_error=on_data_error, track=False, **producer_config),
    )
    gctune.tune()


def _copy_chunk(chunk: Chunk) -> int:
    publisher: Publisher = _worker["publisher"]
    codec = chunk.spec.codec()
    rows = reported = 0
    with session_connect(_worker["dsn"]) as conn:
        conn.execute("begin isolation level repeatable read read only")
        conn.execute(sql.SQL("set transaction snapshot {}").format(_worker["snapshot"]))
        with conn.cursor().copy(chunk.query()) as copy:
            copy.set_types(["text"] * len(chunk.spec.columns))
            for values in copy.rows():
                try:
                    key, value = codec.key(values), codec.value(values)
                except DataError as error:
                    publisher.data_error(error)  # raises unless --on-error=log
                    continue
                publisher.send(codec.topic, key, value)
                rows += 1
                if rows - reported >= PROGRESS_EVERY:
                    publisher.poll(0)
                    _worker["progress"].put((chunk.table, rows - reported))
                    reported = rows
        conn.rollback()
    publisher.flush()  # the chunk counts as copied only once Kafka has all of it
    _worker["progress"].put((chunk.table, rows - reported))
    return rows
