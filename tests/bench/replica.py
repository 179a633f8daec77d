"""The target-Postgres replica (`bottler materialize postgres`) against the target's own bulk
path, on the snapshot's table (ROWS rows of ~100 B), in a second database of the same server:

- raw ceiling: ``COPY … FROM STDIN`` of the table's rows (read beforehand with COPY TO STDOUT)
  into a fresh table of the same shape (primary key included), one connection, one transaction;
- rebuild: a capture snapshots the table into its topic (not timed); then the replica, as a
  child process ``python -m bottler materialize postgres --once`` into a fresh target database,
  is timed from its start to its exit (it exits once caught up), and the target's row count
  checked;
- lag: the capture and the replica (without ``--once``) both running, writer threads commit
  inserts of PER_COMMIT rows each into the source table at a paced rate of rows
  (latency.write); a poller in its own
  process queries the target table every POLL seconds for the rows not seen yet. Lag = the
  poller's clock when it first saw a row − the writer's clock before it sent that row's commit.
"""

from __future__ import annotations

import io
import resource
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from tests.bench import data
from tests.bench.ceilings import drop_slot
from tests.bench.kafka import delete_topics, expect_messages
from tests.bench.latency import TOPIC_CONFIG, WRITERS, _pct, start_observer, write
from tests.bench.procs import SNAPSHOT_DONE, CaptureProcess, CpuMeter, running
from tests.bench.pyspy import sampled
from tests.bench.report import Figure, Target

PREFIX = "bench_replica"
TARGET_DB = "bench_replica_target"
RAW_TABLE = "bench_raw_copy"
GROUP = "bench-replica"
POLL = 0.02  # seconds between the lag poller's queries
PER_COMMIT = 5  # rows per transaction of the lag run: the target is per change, not commit
DRAIN_TIMEOUT = 60  # seconds for the last rows to reach the target
ASSIGNED = r"assigned \d+ partitions"


class ReplicaProcess(CaptureProcess):
    """`python -m bottler materialize postgres ARGS`, watched as the capture is."""

    def start(self) -> ReplicaProcess:
        self.started_at = time.monotonic()
        self.lines = []
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bottler", "materialize", "postgres", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env, text=True,
            errors="replace",
        )
        threading.Thread(target=self._read, args=(self._proc,), daemon=True).start()
        threading.Thread(target=self._sample, args=(self._proc,), daemon=True).start()
        return self

    def wait_exit(self, timeout: float) -> float:
        """The monotonic time the process exited (with status 0, or RuntimeError)."""
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._proc.send_signal(signal.SIGTERM)
            self._proc.wait(30)
            self._fail(f"did not exit within {timeout:.0f} s")
        ended = time.monotonic()
        if self._proc.returncode != 0:
            self._fail(f"exited with status {self._proc.returncode}")
        return ended


def target_dsn(dsn: str) -> str:
    """A fresh, empty database next to the source's."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(TARGET_DB)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(TARGET_DB)))
    return make_conninfo(dsn, dbname=TARGET_DB)


def drop_target(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(TARGET_DB)))


def copy_in(dsn: str, target: str, table: str, rows: int, postgres_pid: int | None) -> Figure:
    """The target's bulk path: COPY FROM STDIN of the table's rows into a fresh table of the
    same shape in the target database, timed from the COPY to the commit."""
    with psycopg.connect(dsn) as conn:
        buf = io.BytesIO()
        with conn.cursor().copy(sql.SQL("copy {} to stdout").format(sql.Identifier(table))) as cp:
            for chunk in cp:
                buf.write(chunk)
    payload = buf.getvalue()
    data.create_table(target, RAW_TABLE)
    meter = CpuMeter({"postgres": postgres_pid}).start()
    with psycopg.connect(target) as conn:
        start = time.perf_counter()
        with conn.cursor().copy(
            sql.SQL("copy {} from stdin").format(sql.Identifier(RAW_TABLE))
        ) as cp:
            for i in range(0, len(payload), 1 << 20):
                cp.write(payload[i:i + (1 << 20)])
        conn.commit()
        elapsed = time.perf_counter() - start
        cpu = meter.note()
    data.drop_table(target, RAW_TABLE)
    return Figure(
        "target postgres: COPY FROM STDIN into a fresh keyed table", rows / elapsed, "rows/s",
        notes=[f"{rows:,} rows ({len(payload) / rows:.0f} B of COPY text each) into a table of "
               f"the same shape with its primary key, one transaction: {elapsed:.1f} s", cpu],
    )


def replica(dsn: str, bootstrap: str, env: dict[str, str], table: str, rows: int,
            first_id: int, rate: float, seconds: float, cpu_roots: dict[str, int | None],
            profile: Path | None = None, lag: bool = True) -> list[Figure]:
    """The raw ceiling, the rebuild measured against it, then (``lag``) the lag figures."""
    drop_slot(dsn, PREFIX)  # a fresh slot and publication: a snapshot of ``table``
    target = target_dsn(dsn)
    say = _say
    try:
        say("replica: raw ceiling, COPY into the target")
        ceiling = copy_in(dsn, target, table, rows, cpu_roots.get("postgres"))
        capture = CaptureProcess("replica-source", env, [
            "--tables", f"public.{table}", "--slot", PREFIX, "--topic-prefix", PREFIX,
            "--snapshot-workers", "2", *TOPIC_CONFIG,
        ])
        capture.start()
        try:
            say(f"replica: capture snapshot of {table} into {PREFIX}.{table}")
            capture.wait_line(SNAPSHOT_DONE, timeout=600)
            expect_messages(bootstrap, f"{PREFIX}.{table}", rows)
            say("replica: rebuild from zero (--once)")
            figures = [ceiling, _rebuild(env, target, table, rows, ceiling, cpu_roots, profile)]
            if lag:
                say(f"replica: lag at {rate:,.0f} rows/s for {seconds:.0f} s")
                figures += _lag(dsn, env, target, table, first_id, rate, seconds, capture,
                                cpu_roots)
        finally:
            capture.stop()
            drop_slot(dsn, PREFIX)
            delete_topics(bootstrap, f"{PREFIX}.")
    finally:
        drop_target(dsn)
    return figures


def _args(extra: list[str]) -> list[str]:
    return ["--topic-prefix", PREFIX, "--group-id", GROUP, "--on-poison", "stop", *extra]


def _rebuild(env, target, table, rows, ceiling, cpu_roots, profile) -> Figure:
    proc = ReplicaProcess("replica-rebuild", {**env, "BOTTLER_TARGET_DSN": target},
                          _args(["--once"]))
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc.start()
    meter = CpuMeter(cpu_roots).start()
    with sampled(profile, "replica-rebuild", proc.pid):
        ended = proc.wait_exit(600)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the replica, reaped just now
    used = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    cpu = meter.note() + f", replica {used:.1f}"
    assigned, _ = proc.wait_line(ASSIGNED, timeout=1)
    with psycopg.connect(target) as conn:
        count = conn.execute(sql.SQL("select count(*) from {}").format(
            sql.Identifier(table))).fetchone()[0]
    if count != rows:
        raise RuntimeError(f"the replica's {table} holds {count:,} rows, not {rows:,}")
    elapsed = ended - proc.started_at
    applying = ended - assigned
    return Figure(
        "replica rebuild from zero: start → caught up, exited", rows / elapsed, "rows/s",
        ceiling=ceiling, target=Target(">=", 50_000),
        notes=[f"{rows:,} rows in {elapsed:.1f} s from process start to its exit "
               f"({rows / applying:,.0f} rows/s from its 'assigned' log line: "
               f"{assigned - proc.started_at:.1f} s of start-up); target row count checked; "
               f"≥ 0.5× the ceiling is the issue's other target: "
               f"{'met' if rows / elapsed >= 0.5 * ceiling.value else 'missed'}; "
               f"peak RSS {proc.peak_mb:.0f} MB", cpu],
    )


def _lag(dsn, env, target, table, first_id, rate, seconds, capture, cpu_roots) -> list[Figure]:
    proc = ReplicaProcess("replica-live", {**env, "BOTTLER_TARGET_DSN": target}, _args([]))
    proc.start()
    try:
        proc.wait_line(ASSIGNED, timeout=60)
        total = int(rate * seconds)
        poller, results = start_observer(poll, (target, table, first_id), total, seconds,
                                         "lag poller")
        meter = CpuMeter({**cpu_roots, "capture": capture.pid, "replica": proc.pid}).start()
        committed, started, ended = write(dsn, table, first_id, total, rate, PER_COMMIT)
        seen = results.get(timeout=seconds + DRAIN_TIMEOUT + 60)
        cpu = meter.note()
        poller.join(10)
        proc.check_alive()
        capture.check_alive()
    finally:
        proc.stop()
    pairs = [(committed[i], seen[i]) for i in committed if i in seen]
    if not pairs:
        raise RuntimeError("no row of the lag run reached the target")
    lags = sorted((at - sent) * 1000 for (sent, _), at in pairs)
    after = sorted((at - done) * 1000 for (_, done), at in pairs)
    achieved = len(committed) / (ended - started)
    return [
        Figure("replica lag load: inserted rows/s achieved by the writer", achieved,
               "changes/s", target=Target(">=", rate * 0.95),
               notes=[f"{len(committed):,} rows inserted in transactions of {PER_COMMIT} from "
                      f"{WRITERS} connections at {achieved:,.0f}/s (asked {rate:,.0f}/s) for "
                      f"{ended - started:.1f} s; {len(committed) - len(pairs)} never reached "
                      "the target; capture and replica running", cpu]),
        Figure("replica lag commit → row visible in the target, p50", _pct(lags, 50), "ms"),
        Figure("replica lag commit → row visible in the target, p99", _pct(lags, 99), "ms",
               target=Target("<", 1000),
               notes=[f"max {lags[-1]:.0f} ms; from the writer's clock before its round trip "
                      f"to the first poll of the target (every {POLL * 1000:.0f} ms) that "
                      f"returned the row; from its clock after the commit returned: p50 "
                      f"{_pct(after, 50):.0f} ms, p99 {_pct(after, 99):.0f} ms"]),
    ]


def poll(dsn, table, first_id, total, ready, results, timeout) -> None:
    """Put {id: wall clock when first seen in the target} of ids first_id… on ``results``."""
    seen: dict[int, float] = {}
    query = sql.SQL("select id from {} where id >= %s and id < %s").format(
        sql.Identifier(table))
    end = first_id + total
    lo = first_id
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(query, (lo, end))  # prepared, connected
        ready.set()
        deadline = time.monotonic() + timeout
        while len(seen) < total and time.monotonic() < deadline:
            ids = conn.execute(query, (lo, end), prepare=True).fetchall()
            now = time.time()
            for (i,) in ids:
                if i not in seen:
                    seen[i] = now
            while lo in seen:
                lo += 1
            time.sleep(POLL)
    results.put(seen)


def _say(what: str) -> None:
    print(f"bench {time.strftime('%H:%M:%S')}: {what}", file=sys.stderr, flush=True)


PARTITIONED_PREFIX = "bench_replica4"
PARTITIONS = 4


def partitioned(dsn: str, bootstrap: str, env: dict[str, str], table: str, rows: int,
                cpu_roots: dict[str, int | None], instances: tuple[int, ...] = (1, 2),
                say=_say) -> list[Figure]:
    """The replica's rebuild of a 4-partition topic of ``table`` by 1, then 2 instances in one
    consumer group (``--join-group``), each run from the first start to the last exit into a
    fresh target; rows/s and CPU seconds per 1k rows (the replicas', the target server's and
    the broker's)."""
    drop_slot(dsn, PARTITIONED_PREFIX)
    capture = CaptureProcess("replica4-source", env, [
        "--tables", f"public.{table}", "--slot", PARTITIONED_PREFIX, "--topic-prefix",
        PARTITIONED_PREFIX, "--partitions", str(PARTITIONS), "--snapshot-workers", "2",
        *TOPIC_CONFIG,
    ])
    figures = []
    try:
        say(f"replica: capture snapshot of {table} into {PARTITIONS} partitions")
        with running(capture):
            capture.wait_line(SNAPSHOT_DONE, timeout=600)
        expect_messages(bootstrap, f"{PARTITIONED_PREFIX}.{table}", rows)
        for n in instances:
            say(f"replica: rebuild of the {PARTITIONS}-partition topic by {n} instance(s)")
            target = target_dsn(dsn)
            try:
                figures.append(_rebuild_by(env, target, table, rows, n, cpu_roots))
            finally:
                drop_target(dsn)
    finally:
        drop_slot(dsn, PARTITIONED_PREFIX)
        delete_topics(bootstrap, f"{PARTITIONED_PREFIX}.")
    return figures


def _rebuild_by(env, target, table, rows, n, cpu_roots) -> Figure:
    group = f"{GROUP}-{PARTITIONS}p-{n}"
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    meter = CpuMeter({k: v for k, v in cpu_roots.items() if k in ("postgres", "broker")})
    procs = [ReplicaProcess(f"replica-{n}-{i}", {**env, "BOTTLER_TARGET_DSN": target}, [
        "--topic-prefix", PARTITIONED_PREFIX, "--group-id", group, "--on-poison", "stop",
        "--once", "--join-group"]) for i in range(n)]  # dynamic members: leave at exit
    meter.start()
    started = time.monotonic()
    for proc in procs:
        proc.start()
    ended = max(proc.wait_exit(600) for proc in procs)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the replicas, reaped just now
    used = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
    servers = meter.note()
    with psycopg.connect(target) as conn:
        count = conn.execute(sql.SQL("select count(*) from {}").format(
            sql.Identifier(table))).fetchone()[0]
    if count != rows:
        raise RuntimeError(f"the replica's {table} holds {count:,} rows, not {rows:,}")
    elapsed = ended - started
    # when each instance was first given partitions: the group's join (and, with several,
    # the rebalance as the next one joins) is part of the time
    joined = [min((t for t, line in proc.lines if " holds " in line), default=ended) - started
              for proc in procs]
    return Figure(
        f"replica rebuild of a {PARTITIONS}-partition topic, {n} instance(s)", rows / elapsed,
        "rows/s",
        notes=[f"{rows:,} rows in {elapsed:.1f} s from the first start to the last exit "
               f"(--join-group --once, one consumer group; first partitions at "
               f"{', '.join(f'{j:.1f}' for j in sorted(joined))} s); replica CPU {used:.1f} s"
               f" = {used / rows * 1000:.4f} s per 1k rows; target row count checked", servers],
    )
