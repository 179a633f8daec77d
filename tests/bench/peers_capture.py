"""The peers bench's capture against capture (tests/bench/peers.py), on a Shape: the bench's
table, or the demo shop's four tables (tests/bench/peers_shop.py):

- snapshot: Debezium's connector with a fresh slot, from the worker's start until its topics
  hold every row; ``bottler capture`` with a fresh slot, from its start until its snapshot line
  (written once Kafka acknowledged every row);
- streaming catch-up: both stopped, as many rows again inserted in one transaction, each resumed
  in turn: from its start (and from its "streaming" log line) until its topics hold them;
- the CPU seconds of each process from its start until done, per 1M rows (the broker's and
  Postgres's apart), and each process's peak RSS (VmHWM).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.bench import connect
from tests.bench.ceilings import drop_slot
from tests.bench.kafka import TopicWatch, delete_topics
from tests.bench.latency import TOPIC_CONFIG
from tests.bench.peers_report import Row, Run, say
from tests.bench.procs import CaptureProcess, CpuMeter, cpu_seconds
from tests.bench.snapshot import DEFAULT_WORKERS, DONE

TIMEOUT = 1200  # seconds for any one run
# Each tool's own start of the work, from its log: the first row read (snapshot), the stream
# opened (catch-up)
SNAPSHOT_DBZ = r"Exporting data from table"
SNAPSHOT_BOTTLER = r"created slot"
STREAMING_DBZ = r"Starting streaming"
STREAMING_BOTTLER = r"streaming from slot"


@dataclass
class Shape:
    """What capture against capture runs on: tables of the public schema holding ``rows`` rows
    in all, and how to insert as many again in one transaction (``again``, given the DSN)."""

    name: str  # its slots', publications' and topic prefixes' stem, its log's name
    label: str  # what its rows of the table begin with ("" for the bench's table)
    tables: tuple[str, ...]
    rows: int
    again: Callable[[str], None]

    @property
    def prefixes(self) -> tuple[str, str]:
        """Debezium's topic prefix (its slot and publication too), then the capture's."""
        return f"dbz_{self.name}", f"bottler_{self.name}"

    def topics(self) -> tuple[list[str], list[str]]:
        """Debezium's topics of the tables, then the capture's."""
        dbz, ours = self.prefixes
        return ([f"{dbz}.public.{t}" for t in self.tables],
                [f"{ours}.{t}" for t in self.tables])


# what runs once both tools have snapshotted (and caught up): given the Debezium worker, the
# capture, their first tables' topics and the rows inserted so far; returns more rows
Then = Callable[[CaptureProcess, CaptureProcess, str, str, int], list[Row]]


def capture_against_capture(ep, env, shape: Shape, measure: bool, roots, notes: list[str],
                            out: Path, root: Path, converter: dict[str, str],
                            then: Then | None = None) -> list[Row]:
    """Both tools' snapshots of ``shape``, then their streaming catch-ups, each side by side
    (or only the snapshots, untimed, unless ``measure``); then ``then``. Each tool's slot and
    topics are removed afterwards."""
    dbz_prefix, ours_prefix = shape.prefixes
    dbz_topics, ours_topics = shape.topics()
    tables = ",".join(f"public.{t}" for t in shape.tables)
    for slot in shape.prefixes:
        drop_slot(ep.pg_dsn, slot)
    worker = connect.ConnectProcess(shape.name, ep.kafka, {"dbz-source": {
        **connect.SOURCE, **connect.database_settings(ep.pg_dsn), "topic.prefix": dbz_prefix,
        "slot.name": dbz_prefix, "publication.name": dbz_prefix,
        "table.include.list": tables}}, log=out / f"connect-{shape.name}.log",
        converter=converter)
    capture = CaptureProcess(shape.name, env, [
        "--tables", tables, "--slot", ours_prefix, "--topic-prefix", ours_prefix,
        "--snapshot-workers", str(DEFAULT_WORKERS), *TOPIC_CONFIG])
    figures: list[Row] = []
    rows = shape.rows
    try:
        say(f"{shape.name}: Debezium snapshot")
        dbz_snap = timed(worker, ep.kafka, dbz_topics, rows, rows, roots, SNAPSHOT_DBZ)
        say(f"{shape.name}: bottler snapshot")
        ours_snap = timed(capture, ep.kafka, ours_topics, rows, rows, roots, SNAPSHOT_BOTTLER,
                          done_line=DONE)
        runs = {"Debezium": [dbz_snap], "bottler": [ours_snap]}
        inserted = rows
        if measure:
            say(f"{shape.name}: {rows:,} more rows in one transaction, both stopped")
            shape.again(ep.pg_dsn)
            inserted += rows
            say(f"{shape.name}: Debezium catch-up")
            runs["Debezium"].append(timed(worker, ep.kafka, dbz_topics, inserted, rows, roots,
                                          STREAMING_DBZ))
            say(f"{shape.name}: bottler catch-up")
            runs["bottler"].append(timed(capture, ep.kafka, ours_topics, inserted, rows, roots,
                                         STREAMING_BOTTLER))
            notes += [f"{shape.name}, {who}: " + n for who, rs in runs.items() for r in rs
                      for n in r.notes]
            figures += side_by_side(shape.label, tuple(runs["Debezium"]),
                                    tuple(runs["bottler"]))
        if then:
            figures += then(worker, capture, dbz_topics[0], ours_topics[0], inserted)
        sizes = {p: bytes_per_message(root, ep.kafka, t)
                 for p, t in ((dbz_prefix, dbz_topics), (ours_prefix, ours_topics))}
    finally:
        worker.cleanup()
        capture.stop()
        for prefix in shape.prefixes:
            drop_slot(ep.pg_dsn, prefix)
            delete_topics(ep.kafka, f"{prefix}.")
    notes.append(f"{shape.name}: bytes per message as stored (key + value, lz4 batches, from "
                 "the topics' log segments): " + ", ".join(f"{p} {b:,.0f}"
                                                           for p, b in sizes.items()))
    return figures


def side_by_side(label: str, dbz: tuple[Run, Run], ours: tuple[Run, Run]) -> list[Row]:
    """The table's rows of the snapshots and the catch-ups (each side's two runs)."""
    (dbz_snap, dbz_up), (ours_snap, ours_up) = dbz, ours
    return [
        Row(f"{label}snapshot, process start → all rows in Kafka (rows/s)", dbz_snap.rate,
            ours_snap.rate, "rows/s", "higher"),
        Row(f"{label}snapshot, its first log line of the work → all rows in Kafka (rows/s)",
            dbz_snap.from_line, ours_snap.from_line, "rows/s", "higher"),
        Row(f"{label}streaming catch-up, process start → all rows in Kafka (rows/s)",
            dbz_up.rate, ours_up.rate, "rows/s", "higher"),
        Row(f"{label}streaming catch-up, its 'streaming' log line → all rows in Kafka (rows/s)",
            dbz_up.from_line, ours_up.from_line, "rows/s", "higher"),
        Row(f"{label}CPU s per 1M rows, snapshot (the tool's processes)",
            dbz_snap.cpu_per_million, ours_snap.cpu_per_million, "s", "lower"),
        Row(f"{label}CPU s per 1M rows, catch-up (the tool's processes)",
            dbz_up.cpu_per_million, ours_up.cpu_per_million, "s", "lower"),
        Row(f"{label}peak RSS, snapshot (MB)", dbz_snap.rss_mb, ours_snap.rss_mb, "MB", "lower"),
        Row(f"{label}peak RSS, catch-up (MB)", dbz_up.rss_mb, ours_up.rss_mb, "MB", "lower"),
    ]


def timed(proc: CaptureProcess, bootstrap: str, topics: list[str], expected: int, rows: int,
          roots, line: str, done_line: str | None = None) -> Run:
    """Start ``proc`` (fresh peak counters), wait until ``topics`` hold ``expected`` messages
    (and until it logged ``done_line``, if given), then stop it. ``line`` is its own log line
    for the start of the work."""
    proc.peak_kb, proc.worker_peaks, proc.peak_pss_kb = 0, {}, 0
    watch = TopicWatch(bootstrap, *topics)
    try:
        meter = CpuMeter(roots).start()
        proc.start()
        done = watch.reached(expected, TIMEOUT, proc.check_alive)
        if done_line:
            done = max(done, proc.wait_line(done_line, timeout=TIMEOUT)[0])
        cpu = cpu_seconds(proc.pid)
        note = meter.note()
        began = _first(proc, line)
        proc.stop()
    finally:
        watch.close()
    if began is None:
        raise RuntimeError(f"{proc.name} did not log /{line}/")
    took = done - proc.started_at
    rss = proc.peak_mb + proc.workers_peak_mb
    return Run(took, rows, cpu, rss, from_line=rows / (done - began), notes=[
        f"{rows:,} rows in {took:.1f} s from the process's start, {done - began:.1f} s from its "
        f"line /{line}/ ({began - proc.started_at:.1f} s after the start); its CPU "
        f"{cpu:.1f} s, peak RSS {rss:.0f} MB (VmHWM; the capture's includes its snapshot workers); "
        f"{note}"])


def _first(proc: CaptureProcess, pattern: str) -> float | None:
    """When ``proc`` first logged a line matching ``pattern``, if it did."""
    regex = re.compile(pattern)
    return next((t for t, text in proc.lines if regex.search(text)), None)


def bytes_per_message(stack_root: Path, bootstrap: str, topics: list[str]) -> float:
    """The topics' log segments on the broker's disk over their message count."""
    size = sum(f.stat().st_size for topic in topics for d in stack_root.glob(f"**/{topic}-*")
               if d.is_dir() for f in d.glob("*.log"))
    watch = TopicWatch(bootstrap, *topics)
    try:
        count = watch.end()
    finally:
        watch.close()
    return size / count if count and size else float("nan")
