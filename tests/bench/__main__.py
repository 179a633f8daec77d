"""`make bench`: start an isolated embedded stack, measure, print one report.

Every capture figure is measured on the same data as its raw ceiling, in the same run: the
decode ceilings and the stream on tables of ROWS rows inserted in TRANSACTIONS transactions,
COPY and the snapshot on one table of ROWS rows. See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from compose.stack import isolated_stack
from tests.bench import ceilings, data, pyspy
from tests.bench.latency import latency
from tests.bench.replica import replica
from tests.bench.report import Figure, Target, code_line, machine_line, print_report
from tests.bench.snapshot import snapshot
from tests.bench.stream import StreamBench

ROWS = 1_000_000  # rows of ~100 B per decode, stream and snapshot measurement
TRANSACTIONS = 1  # transactions the ROWS rows are inserted in
LATENCY_RATE = 5_000  # single-row insert commits per second during the latency run
LATENCY_SECONDS = 10
SNAPSHOT_WORKERS = (2, 1)
RSS_TARGET_MB = 300

DECODE_TABLE = "bench_decode"
STREAM_TABLE = "bench_stream"
SNAPSHOT_TABLE = "bench_snapshot"


def say(what: str) -> None:
    print(f"bench {time.strftime('%H:%M:%S')}: {what}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows per table [{ROWS:,}]")
    parser.add_argument("--profile", type=Path, metavar="DIR",
                        help="sample the capture with py-spy into DIR (see tests/bench/pyspy.py)")
    parser.add_argument("--replica-only", action="store_true",
                        help="only the target-Postgres replica's figures (and their ceiling)")
    args = parser.parse_args(argv)
    rows = args.rows
    header = [code_line(), machine_line() + " at the start"]
    started = time.monotonic()
    with isolated_stack() as stack:
        ep = stack.endpoints
        env = {"BOTTLER_PG_DSN": ep.pg_dsn, "BOTTLER_KAFKA": ep.kafka,
               "BOTTLER_REGISTRY": ep.registry}
        cpu_roots = {"postgres": stack.postgres.running_pid(),
                     "broker": stack.broker.running_pid()}
        figures: list[Figure] = []

        say(f"filling {SNAPSHOT_TABLE} with {rows:,} rows (no slot exists yet)")
        data.create_table(ep.pg_dsn, SNAPSHOT_TABLE)
        data.fill(ep.pg_dsn, SNAPSHOT_TABLE, 1, rows)
        data.vacuum(ep.pg_dsn, SNAPSHOT_TABLE)

        if args.replica_only:
            figures += _replica(ep, env, rows, cpu_roots, args.profile)
            print_report(figures, header)
            for summary in pyspy.summaries():
                print("\n" + summary)
            return

        say("decode ceiling, catch-up (pg_recvlogical --endpos)")
        decode_catch_up = ceilings.decode_catch_up(ep.pg_dsn, DECODE_TABLE, rows, TRANSACTIONS)
        say("decode ceiling, live (pg_recvlogical streaming during the insert)")
        decode_live = ceilings.decode_live(ep.pg_dsn, DECODE_TABLE, rows, TRANSACTIONS)
        data.drop_table(ep.pg_dsn, DECODE_TABLE)
        figures += [decode_catch_up, decode_live]

        stream = StreamBench(ep.pg_dsn, ep.kafka, env, STREAM_TABLE, cpu_roots, args.profile)
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
        figures.append(Figure(
            "capture RSS peak: stream (catch-up, live, latency)", stream.capture.peak_mb, "MB",
            target=Target("<", RSS_TARGET_MB),
            notes=["VmHWM of the `bottler capture` process (the largest of its runs), "
                   f"sampled every 0.25 s; peak PSS {stream.capture.peak_pss_mb:.0f} MB"],
        ))

        say("COPY ceiling")
        copy = ceilings.copy_out(ep.pg_dsn, SNAPSHOT_TABLE, rows)
        figures.append(copy)
        for workers in SNAPSHOT_WORKERS:
            say(f"capture snapshot, {workers} worker(s)")
            figure, capture = snapshot(env, ep.kafka, SNAPSHOT_TABLE, rows, workers, copy,
                                       cpu_roots, args.profile)
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
        figures += _replica(ep, env, rows, cpu_roots, args.profile)
        say("broker ceiling")
        figures.append(ceilings.broker_produce(ep.kafka, cpu_roots["broker"]))
    header.append(machine_line() + f" at the end; {time.monotonic() - started:.0f} s in all")
    print_report(figures, header)
    for summary in pyspy.summaries():
        print("\n" + summary)


def _replica(ep, env, rows, cpu_roots, profile) -> list[Figure]:
    """The replica on the snapshot's table: its ceiling, its rebuild, its lag."""
    return replica(ep.pg_dsn, ep.kafka, env, SNAPSHOT_TABLE, rows, rows + 1, LATENCY_RATE,
                   LATENCY_SECONDS, cpu_roots, profile)


if __name__ == "__main__":
    main()
