"""`make bench`: start an isolated embedded stack, measure, print one report and write it
(Markdown and PNG charts) into bench-report/.

Every figure is measured on the same data as its raw ceiling, in the same run: the decode
ceilings and the stream on tables of ROWS rows inserted in TRANSACTIONS transactions, COPY, the
snapshot, the replica and the search index on one table of ROWS rows, the warehouse's MERGE of
ROWS/10 changes into a ROWS-row Delta table. Then the stream catch-up, the snapshot and the
replica rebuild again, each with its ceiling, at the smaller sizes of --scaling. See
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from compose.stack import isolated_stack
from tests.bench import ceilings, data, pyspy
from tests.bench.kafka import delete_topics, expect_messages
from tests.bench.large_transactions import large_transactions
from tests.bench.latency import latency
from tests.bench.migration import migration, seeded_sizes
from tests.bench.procs import SNAPSHOT_DONE, CaptureProcess, running, unwind_on_sigterm
from tests.bench.replica import partitioned, replica
from tests.bench.report import (
    Figure,
    ScalePoint,
    Target,
    code_line,
    machine_line,
    print_report,
    write_report,
)
from tests.bench.search import search
from tests.bench.snapshot import DEFAULT_WORKERS, snapshot
from tests.bench.stream import StreamBench
from tests.bench.translator import translator
from tests.bench.warehouse import warehouse, warehouse_rss
from tests.bench.warehouse_load import warehouse_load

ROWS = 1_000_000  # rows of ~100 B per decode, stream and snapshot measurement
TRANSACTIONS = 1  # transactions the ROWS rows are inserted in
LATENCY_RATE = 5_000  # single-row insert commits per second during the latency run
LATENCY_SECONDS = 10
SNAPSHOT_WORKERS = (2, 1)
RSS_TARGET_MB = 300
LARGE_FACTOR = 5  # the large transaction's UPDATE covers this many times --rows rows
SCALING = (10_000, 100_000)  # the smaller sizes of the scaling series; ROWS is the largest
REPORT = Path(__file__).resolve().parents[2] / "bench-report"

STREAM_SERIES = "capture stream, catch-up"
SNAPSHOT_SERIES = f"capture snapshot, {DEFAULT_WORKERS} workers"
REPLICA_SERIES = "replica rebuild (apply)"

DECODE_TABLE = "bench_decode"
STREAM_TABLE = "bench_stream"
SNAPSHOT_TABLE = "bench_snapshot"
SEARCH_PREFIX = "bench_search"


def say(what: str) -> None:
    print(f"bench {time.strftime('%H:%M:%S')}: {what}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--peers" in argv:  # `make bench-peers`: bottler against Debezium, a bench of its own
        from tests.bench import peers
        return peers.main([a for a in argv if a != "--peers"])
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows per table [{ROWS:,}]")
    parser.add_argument("--scaling", type=_sizes, default=SCALING, metavar="N,N…",
                        help="the other sizes of the scaling series, besides --rows "
                             f"[{','.join(map(str, SCALING))}]; '' for none")
    parser.add_argument("--out", type=Path, default=REPORT, metavar="DIR",
                        help=f"where the report (README.md and charts) goes [{REPORT}]")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="sample the capture with py-spy into DIR (see tests/bench/pyspy.py)")
    parser.add_argument("--replica-only", action="store_true",
                        help="only the target-Postgres replica's figures (and their ceiling)")
    parser.add_argument("--warehouse-only", action="store_true",
                        help="only the warehouse's figures (the Spark job on the stack, the "
                             "MERGE against an append, the driver's RSS)")
    parser.add_argument("--peers", action="store_true",
                        help="bottler against Debezium instead (tests/bench/peers.py; its own "
                             "options follow, see python -m tests.bench.peers --help)")
    parser.add_argument("--large-transactions-only", action="store_true",
                        help=f"only the large transaction's figures: a {LARGE_FACTOR} × --rows "
                             "row UPDATE in one transaction, protocol 1 and streamed")
    parser.add_argument("--migration-only", action="store_true",
                        help="only the migration figures: the initial copy against pg_dump | "
                             "psql, the cutover's downtime, the verify rate")
    parser.add_argument("--migration-sizes", type=_sizes, metavar="N,N…",
                        help="with --migration-only: instead, the seeded initial copy against "
                             "pg_dump | psql alone, at each of these sizes (`make "
                             "bench-migration`: 1000000,10000000)")
    parser.add_argument("--capture-only", action="store_true",
                        help="only the capture's figures (stream, snapshot) and their ceilings")
    parser.add_argument("--search-only", action="store_true",
                        help="only the search rebuild against the engine's own _bulk")
    parser.add_argument("--pg-version", metavar="N",
                        help="the stack's PostgreSQL major [the first found, as `stack up`]")
    args = parser.parse_args(argv)
    unwind_on_sigterm("bench")
    rows = args.rows
    header = [code_line(), machine_line() + " at the start"]
    started = time.monotonic()
    figures: list[Figure] = []
    scaling: list[ScalePoint] = []
    with isolated_stack(args.pg_version) as stack:
        ep = stack.endpoints
        env = {"BOTTLER_PG_DSN": ep.pg_dsn, "BOTTLER_KAFKA": ep.kafka,
               "BOTTLER_REGISTRY": ep.registry}
        header.append(f"PostgreSQL {stack.postgres.data_version()}")
        cpu_roots = {"postgres": stack.postgres.running_pid(),
                     "broker": stack.broker.running_pid(),
                     "search engine": stack.search_engine.running_pid()}

        if not (args.large_transactions_only or args.migration_sizes):
            say(f"filling {SNAPSHOT_TABLE} with {rows:,} rows (no slot exists yet)")
            _snapshot_table(ep.pg_dsn, SNAPSHOT_TABLE, rows)

        if args.replica_only:
            figures += _replica(ep, env, SNAPSHOT_TABLE, rows, cpu_roots, args.profile)
        elif args.warehouse_only:
            figures += warehouse_load(ep, env, SNAPSHOT_TABLE, say=say)
        elif args.migration_only and args.migration_sizes:
            figures += seeded_sizes(ep.pg_dsn, ep.kafka, env, args.migration_sizes,
                                    cpu_roots, stack.root)
        elif args.migration_only:
            figures += migration(ep.pg_dsn, ep.kafka, env, SNAPSHOT_TABLE, rows, cpu_roots)
        elif args.large_transactions_only:
            figures += large_transactions(ep.pg_dsn, ep.kafka, env, LARGE_FACTOR * rows, say)
        elif args.capture_only:
            figures += _capture(ep, env, rows, cpu_roots, args.profile)
        elif args.search_only:
            figures += _search(ep, env, SNAPSHOT_TABLE, rows, cpu_roots)
        else:
            figures += _capture(ep, env, rows, cpu_roots, args.profile)
            figures += large_transactions(ep.pg_dsn, ep.kafka, env, LARGE_FACTOR * rows, say)
            figures += _search(ep, env, SNAPSHOT_TABLE, rows, cpu_roots)
            figures += migration(ep.pg_dsn, ep.kafka, env, SNAPSHOT_TABLE, rows, cpu_roots)
            # last on this table: its lag run inserts more rows into it
            figures += _replica(ep, env, SNAPSHOT_TABLE, rows, cpu_roots, args.profile)
            figures += translator(ep.pg_dsn, ep.kafka, env, rows, cpu_roots, say=say)
            figures += warehouse_load(ep, env, SNAPSHOT_TABLE, say=say)
            scaling += _main_points(figures, rows)
            for size in sorted(set(args.scaling) - {rows}):
                scaling += _scale(ep, env, size, cpu_roots)
            say("broker ceiling")
            figures.append(ceilings.broker_produce(ep.kafka, cpu_roots["broker"]))
    if not (args.replica_only or args.migration_only or args.large_transactions_only
            or args.capture_only or args.search_only):
        say(f"warehouse: MERGE of {rows // 10:,} changes into a {rows:,}-row Delta table")
        figures += warehouse(rows, rows // 10, say=say)
        figures += warehouse_rss(rows, say=say)
    header.append(machine_line() + f" at the end; {time.monotonic() - started:.0f} s in all")
    print_report(figures, header)
    for summary in pyspy.summaries():
        print("\n" + summary)
    readme = write_report(args.out, figures, header, scaling)
    say(f"report written to {readme}")


def _sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(n.replace("_", "")) for n in text.split(",") if n.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of row counts: {text!r}") from None


def _snapshot_table(dsn: str, table: str, rows: int) -> None:
    data.create_table(dsn, table)
    data.fill(dsn, table, 1, rows)
    data.vacuum(dsn, table)


def _capture(ep, env, rows, cpu_roots, profile) -> list[Figure]:
    """The decode ceilings, the stream, latency and memory; COPY and the snapshot."""
    figures: list[Figure] = []
    say("decode ceiling, catch-up (pg_recvlogical --endpos)")
    decode_catch_up = ceilings.decode_catch_up(ep.pg_dsn, DECODE_TABLE, rows, TRANSACTIONS)
    say("decode ceiling, live (pg_recvlogical streaming during the insert)")
    decode_live = ceilings.decode_live(ep.pg_dsn, DECODE_TABLE, rows, TRANSACTIONS)
    data.drop_table(ep.pg_dsn, DECODE_TABLE)
    figures += [decode_catch_up, decode_live]

    stream = StreamBench(ep.pg_dsn, ep.kafka, env, STREAM_TABLE, cpu_roots, profile)
    try:
        say("capture stream, catch-up")
        figures.append(stream.catch_up(rows, TRANSACTIONS, decode_catch_up))
        say("capture stream, live")
        figures += stream.live(rows, TRANSACTIONS, decode_live)
        say(f"latency at {LATENCY_RATE:,} commits/s for {LATENCY_SECONDS} s")
        stream.fresh_topic()
        figures += latency(ep.pg_dsn, ep.kafka, STREAM_TABLE, stream.topic, stream.next_id,
                           LATENCY_RATE, LATENCY_SECONDS, stream.capture, cpu_roots)
    finally:
        stream.close()
    data.drop_table(ep.pg_dsn, STREAM_TABLE)
    main_kb, workers_kb = stream.capture.largest_run()
    figures.append(Figure(
        "capture RSS peak: stream (catch-up, live, latency), main + replay workers",
        (main_kb + sum(workers_kb)) / 1024, "MB", target=Target("<", RSS_TARGET_MB),
        notes=[f"of its runs, the largest: main process {main_kb / 1024:.0f} MB + "
               f"{len(workers_kb)} replay worker(s) "
               + " + ".join(f"{kb / 1024:.0f}" for kb in workers_kb)
               + " MB (VmHWM of each, sampled every 0.25 s, summed: shared pages count once "
               f"per process); peak PSS, as sampled: {stream.capture.peak_pss_mb:.0f} MB"],
    ))

    say("COPY ceiling")
    copy = ceilings.copy_out(ep.pg_dsn, SNAPSHOT_TABLE, rows)
    figures.append(copy)
    for workers in SNAPSHOT_WORKERS:
        say(f"capture snapshot, {workers} worker(s)")
        figure, capture = snapshot(env, ep.kafka, SNAPSHOT_TABLE, rows, workers, copy,
                                   cpu_roots, profile)
        figures.append(figure)
        figures.append(Figure(
            f"capture RSS peak: snapshot, {workers} worker(s), main + workers",
            capture.peak_mb + capture.workers_peak_mb, "MB",
            target=Target("<", RSS_TARGET_MB),
            notes=[f"main process {capture.peak_mb:.0f} MB + "
                   f"{len(capture.worker_peaks)} worker(s) "
                   + " + ".join(f"{kb / 1024:.0f}" for kb in capture.worker_peaks.values())
                   + " MB (VmHWM of each, summed: shared pages count once per process); "
                   f"peak PSS of them together, as sampled: {capture.peak_pss_mb:.0f} MB"],
        ))
    return figures


def _replica(ep, env, table, rows, cpu_roots, profile, lag=True) -> list[Figure]:
    """The replica on ``table``: its ceiling, its rebuild, (``lag``) its lag; then the rebuild
    of a 4-partition topic by 1 and by 2 instances."""
    # first: the lag run inserts more rows into the table (the scaling series' smaller sizes
    # take the plain rebuild only)
    scaled = partitioned(ep.pg_dsn, ep.kafka, env, table, rows, cpu_roots, say=say) if lag else []
    figures = replica(ep.pg_dsn, ep.kafka, env, table, rows, rows + 1, LATENCY_RATE,
                      LATENCY_SECONDS, cpu_roots, profile, lag=lag)
    return figures + scaled


def _search(ep, env, table, rows, cpu_roots) -> list[Figure]:
    """The search materializer on a capture snapshot of ``table`` (not timed)."""
    say(f"search: capture snapshot of {table} into {SEARCH_PREFIX}.{table}")
    ceilings.drop_slot(ep.pg_dsn, SEARCH_PREFIX)
    capture = CaptureProcess("search-source", env, [
        "--tables", f"public.{table}", "--slot", SEARCH_PREFIX, "--topic-prefix", SEARCH_PREFIX,
    ])
    topic = f"{SEARCH_PREFIX}.{table}"
    try:
        with running(capture):
            capture.wait_line(SNAPSHOT_DONE, timeout=600)
        expect_messages(ep.kafka, topic, rows)
        return search(ep.search, ep.kafka, ep.registry, topic, rows,
                      {k: cpu_roots[k] for k in ("broker", "search engine")})
    finally:
        ceilings.drop_slot(ep.pg_dsn, SEARCH_PREFIX)
        delete_topics(ep.kafka, f"{SEARCH_PREFIX}.")


def _main_points(figures: list[Figure], rows: int) -> list[ScalePoint]:
    """The main run's figures that the scaling series continue, found by name."""
    series = {STREAM_SERIES: "capture stream, catch-up:",
              SNAPSHOT_SERIES: f"capture snapshot, {DEFAULT_WORKERS} workers:",
              REPLICA_SERIES: "replica rebuild from zero:"}
    return [ScalePoint(name, rows, f) for name, prefix in series.items()
            for f in figures if f.name.startswith(prefix)]


def _scale(ep, env, rows, cpu_roots) -> list[ScalePoint]:
    """The scaling series at ``rows``: stream catch-up, snapshot and replica rebuild, each
    against its ceiling measured at this size."""
    say(f"scaling at {rows:,} rows: decode ceiling and capture stream, catch-up")
    decode = ceilings.decode_catch_up(ep.pg_dsn, DECODE_TABLE, rows, TRANSACTIONS)
    data.drop_table(ep.pg_dsn, DECODE_TABLE)
    table = f"bench_scale_{rows}"
    stream = StreamBench(ep.pg_dsn, ep.kafka, env, table, cpu_roots)
    try:
        caught_up = stream.catch_up(rows, TRANSACTIONS, decode)
    finally:
        stream.close()
    say(f"scaling at {rows:,} rows: COPY ceiling and capture snapshot")
    _snapshot_table(ep.pg_dsn, table, rows)
    copy = ceilings.copy_out(ep.pg_dsn, table, rows)
    snapshotted, _ = snapshot(env, ep.kafka, table, rows, DEFAULT_WORKERS, copy, cpu_roots)
    say(f"scaling at {rows:,} rows: replica ceiling and rebuild")
    _, rebuilt = _replica(ep, env, table, rows, cpu_roots, None, lag=False)
    data.drop_table(ep.pg_dsn, table)
    return [ScalePoint(STREAM_SERIES, rows, caught_up),
            ScalePoint(SNAPSHOT_SERIES, rows, snapshotted),
            ScalePoint(REPLICA_SERIES, rows, rebuilt)]


if __name__ == "__main__":
    main()
