"""`make bench-peers`: bottler side by side with the incumbents on this machine, one after the
other on the same table of ROWS rows (~100 B) and the same embedded stack's broker (issue 30):

- PG→PG (tests/bench/peers_pg2pg.py): the initial copy to target-equal (``pg_dump | psql``, the
  floor; Debezium's connector and JDBC sink; ``bottler capture`` and ``bottler materialize
  postgres``, through the topics and seeded), then the catch-up of --changes updates to
  target-equal, each checked by the same checksum against the source;
- capture against capture:
  - snapshot: Debezium's connector with a fresh slot, from the worker's start until the topic
    holds every row; ``bottler capture`` with a fresh slot, from its start until its snapshot
    line (written once Kafka acknowledged every row);
  - streaming catch-up: both stopped, ROWS more rows inserted in one transaction, each resumed
    in turn: from its start (and from its "streaming" log line) until its topic holds them;
  - the CPU seconds of each process from its start until done, per 1M rows (the broker's and
    Postgres's apart), and each process's peak RSS (VmHWM);
  - live streaming and commit → broker latency, each tool in turn (tests/bench/peers_live.py).

The report (tests/bench/peers_report.py) lists Debezium's settings (tests/bench/connect.py
WORKER, SOURCE and SINK). See docs/benchmarks.md "Against Debezium".
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import time
from pathlib import Path

from compose.stack import isolated_stack
from tests.bench import connect, data, peers_report
from tests.bench.ceilings import drop_slot
from tests.bench.kafka import TopicWatch, delete_topics
from tests.bench.latency import TOPIC_CONFIG
from tests.bench.peers_live import Tool, live_and_latency
from tests.bench.peers_pg2pg import pg2pg
from tests.bench.peers_report import Row, Run, say, versions
from tests.bench.procs import CaptureProcess, CpuMeter, cpu_seconds
from tests.bench.report import code_line, machine_line
from tests.bench.snapshot import DEFAULT_WORKERS, DONE

ROWS = 1_000_000
LATENCY_RATE = 5_000  # single-row insert commits a second
LATENCY_SECONDS = 20
PARTS = ("pg2pg", "capture", "live", "latency")
TABLE = "bench_peers"
REPORT = Path(__file__).resolve().parents[2] / "bench-report"
TIMEOUT = 1200  # seconds for any one run
DBZ_PREFIX = "dbz_peers"  # Debezium's topic prefix, slot and publication
BOTTLER_PREFIX = "bottler_peers"
# Each tool's own start of the work, from its log: the first row read (snapshot), the stream
# opened (catch-up)
SNAPSHOT_DBZ = r"Exporting data from table"
SNAPSHOT_BOTTLER = r"created slot"
STREAMING_DBZ = r"Starting streaming"
STREAMING_BOTTLER = r"streaming from slot"


def _parts(text: str) -> set[str]:
    parts = {p.strip() for p in text.split(",") if p.strip()}
    if unknown := parts - set(PARTS):
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(sorted(unknown))}: "
                                         f"choose among {','.join(PARTS)}")
    return parts


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows of the table [{ROWS:,}]")
    parser.add_argument("--changes", type=int, metavar="N",
                        help="updates of the PG→PG catch-up [--rows]; 0 leaves it out")
    parser.add_argument("--parts", type=_parts, default=set(PARTS), metavar="PART,…",
                        help=f"what to measure, among {','.join(PARTS)} [all]; live and latency "
                             "still let each tool snapshot the table first, untimed")
    parser.add_argument("--latency-rate", type=float, default=LATENCY_RATE, metavar="N",
                        help=f"commits a second of the latency load [{LATENCY_RATE:,}]")
    parser.add_argument("--latency-seconds", type=float, default=LATENCY_SECONDS, metavar="S",
                        help=f"how long the latency load runs [{LATENCY_SECONDS}]")
    parser.add_argument("--out", type=Path, default=REPORT, metavar="DIR",
                        help=f"where the report (peers.md, peers.png) goes [{REPORT}]")
    parser.add_argument("--skip-pg2pg", action="store_true",
                        help="capture against capture only (--parts capture,live,latency)")
    args = parser.parse_args(argv)
    if args.skip_pg2pg:
        args.parts.discard("pg2pg")
    if args.changes is None:
        args.changes = args.rows
    return args


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    # SIGTERM (a timeout, ^C's cousin) unwinds as an exception: the stack, the slots and
    # Connect's directory are cleaned up by the finally blocks
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench-peers: terminated"))
    rows = args.rows
    for old in args.out.glob("connect-*.log"):
        old.unlink()
    header = [code_line(), versions(), machine_line() + " at the start",
              f"parts: {','.join(p for p in PARTS if p in args.parts)}"]
    started = time.monotonic()
    table: list[Row] = []
    notes: list[str] = []
    with isolated_stack() as stack:
        ep = stack.endpoints
        env = {"BOTTLER_PG_DSN": ep.pg_dsn, "BOTTLER_KAFKA": ep.kafka,
               "BOTTLER_REGISTRY": ep.registry}
        roots = {"postgres": stack.postgres.running_pid(), "broker": stack.broker.running_pid()}
        say(f"filling {TABLE} with {rows:,} rows")
        data.create_table(ep.pg_dsn, TABLE)
        data.fill(ep.pg_dsn, TABLE, 1, rows)
        data.vacuum(ep.pg_dsn, TABLE)
        if "pg2pg" in args.parts:
            table += pg2pg(ep, env, TABLE, rows, args.changes, roots, notes, args.out)
            header.append(machine_line() + " after PG→PG")
        if args.parts - {"pg2pg"}:
            table += _capture(ep, env, args, roots, notes, stack.root)
    header.append(machine_line() + f" at the end; {time.monotonic() - started:.0f} s in all")
    peers_report.print_table(table, header, notes)
    say(f"report written to {peers_report.write(args.out, table, header, notes)}")


# -- capture against capture -------------------------------------------------------------------

def _capture(ep, env, args, roots, notes, root: Path) -> list[Row]:
    rows, parts = args.rows, args.parts
    dbz_topic = f"{DBZ_PREFIX}.public.{TABLE}"
    ours_topic = f"{BOTTLER_PREFIX}.{TABLE}"
    for slot in (DBZ_PREFIX, BOTTLER_PREFIX):
        drop_slot(ep.pg_dsn, slot)
    worker = connect.ConnectProcess("capture", ep.kafka, {"dbz-source": {
        **connect.SOURCE, **connect.database_settings(ep.pg_dsn), "topic.prefix": DBZ_PREFIX,
        "slot.name": DBZ_PREFIX, "publication.name": DBZ_PREFIX,
        "table.include.list": f"public.{TABLE}"}}, log=args.out / "connect-capture.log")
    capture = CaptureProcess("capture", env, [
        "--tables", f"public.{TABLE}", "--slot", BOTTLER_PREFIX, "--topic-prefix",
        BOTTLER_PREFIX, "--snapshot-workers", str(DEFAULT_WORKERS), *TOPIC_CONFIG])
    figures: list[Row] = []
    try:
        say("capture: Debezium snapshot")
        dbz_snap = _timed(worker, ep.kafka, dbz_topic, rows, rows, roots, SNAPSHOT_DBZ)
        say("capture: bottler snapshot")
        ours_snap = _timed(capture, ep.kafka, ours_topic, rows, rows, roots, SNAPSHOT_BOTTLER,
                           done_line=DONE)
        inserted = rows
        if "capture" in parts:
            figures += _catch_up(ep, worker, capture, (dbz_topic, ours_topic), rows, roots,
                                 notes, (dbz_snap, ours_snap))
            inserted += rows
        if parts & {"live", "latency"}:
            figures += live_and_latency(
                ep.pg_dsn, ep.kafka, TABLE,
                [Tool("Debezium", worker, dbz_topic, STREAMING_DBZ, connect.key_id),
                 Tool("bottler", capture, ours_topic, STREAMING_BOTTLER)],
                inserted + 1, rows, args.latency_rate, args.latency_seconds, parts, roots,
                notes)
        sizes = {t: _bytes_per_message(root, ep.kafka, t) for t in (dbz_topic, ours_topic)}
    finally:
        worker.cleanup()
        capture.stop()
        for slot in (DBZ_PREFIX, BOTTLER_PREFIX):
            drop_slot(ep.pg_dsn, slot)
        delete_topics(ep.kafka, f"{DBZ_PREFIX}.")
        delete_topics(ep.kafka, f"{BOTTLER_PREFIX}.")
    notes.append("bytes per message as stored (key + value, lz4 batches, from the topic's "
                 "log segments): " + ", ".join(f"{t} {b:,.0f}" for t, b in sizes.items()))
    return figures


def _catch_up(ep, worker, capture, topics, rows, roots, notes, snaps) -> list[Row]:
    """The snapshots' rows, then the streaming catch-up's: both stopped, ``rows`` more rows in
    one transaction, each resumed in turn."""
    dbz_topic, ours_topic = topics
    say(f"capture: {rows:,} more rows in one transaction, both stopped")
    data.fill(ep.pg_dsn, TABLE, rows + 1, rows)
    say("capture: Debezium catch-up")
    dbz_up = _timed(worker, ep.kafka, dbz_topic, 2 * rows, rows, roots, STREAMING_DBZ)
    say("capture: bottler catch-up")
    ours_up = _timed(capture, ep.kafka, ours_topic, 2 * rows, rows, roots, STREAMING_BOTTLER)
    dbz_snap, ours_snap = snaps
    for who, runs in (("Debezium", (dbz_snap, dbz_up)), ("bottler", (ours_snap, ours_up))):
        notes += [f"capture, {who}: " + n for r in runs for n in r.notes]
    return [
        Row("snapshot, process start → all rows in Kafka (rows/s)", dbz_snap.rate,
            ours_snap.rate, "rows/s", "higher"),
        Row("snapshot, its first log line of the work → all rows in Kafka (rows/s)",
            dbz_snap.from_line, ours_snap.from_line, "rows/s", "higher"),
        Row("streaming catch-up, process start → all rows in Kafka (rows/s)", dbz_up.rate,
            ours_up.rate, "rows/s", "higher"),
        Row("streaming catch-up, its 'streaming' log line → all rows in Kafka (rows/s)",
            dbz_up.from_line, ours_up.from_line, "rows/s", "higher"),
        Row("CPU s per 1M rows, snapshot (the tool's processes)", dbz_snap.cpu_per_million,
            ours_snap.cpu_per_million, "s", "lower"),
        Row("CPU s per 1M rows, catch-up (the tool's processes)", dbz_up.cpu_per_million,
            ours_up.cpu_per_million, "s", "lower"),
        Row("peak RSS, snapshot (MB)", dbz_snap.rss_mb, ours_snap.rss_mb, "MB", "lower"),
        Row("peak RSS, catch-up (MB)", dbz_up.rss_mb, ours_up.rss_mb, "MB", "lower"),
    ]


def _timed(proc: CaptureProcess, bootstrap: str, topic: str, expected: int, rows: int,
           roots, line: str, done_line: str | None = None) -> Run:
    """Start ``proc`` (fresh peak counters), wait until ``topic`` holds ``expected`` messages
    (and until it logged ``done_line``, if given), then stop it. ``line`` is its own log line
    for the start of the work."""
    proc.peak_kb, proc.worker_peaks, proc.peak_pss_kb = 0, {}, 0
    watch = TopicWatch(bootstrap, topic)
    try:
        meter = CpuMeter(roots).start()
        proc.start()
        deadline = time.monotonic() + TIMEOUT
        while watch.end() < expected:
            proc.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} lacks messages after {TIMEOUT} s")
            time.sleep(0.02)
        done = time.monotonic()
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


def _bytes_per_message(stack_root: Path, bootstrap: str, topic: str) -> float:
    """The topic's log segments on the broker's disk over its message count."""
    size = sum(f.stat().st_size for d in stack_root.glob(f"**/{topic}-*") if d.is_dir()
               for f in d.glob("*.log"))
    watch = TopicWatch(bootstrap, topic)
    try:
        count = watch.end()
    finally:
        watch.close()
    return size / count if count and size else float("nan")


if __name__ == "__main__":
    main()
