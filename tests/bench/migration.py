"""The migration figures (issue 18), on the snapshot's table (ROWS rows of ~100 B), each against
its raw ceiling in the same run:

- ``pg_dump | psql``: ``pg_dump --table`` of the table piped into ``psql`` on a fresh database
  of the same server, timed end to end: what a team would otherwise use for the first copy;
  timed just before and just after the seeded copy, the mean of the two (the load drifts);
- initial copy, seeded: a capture (fresh slot and prefix) and ``bottler materialize postgres
  --seed-from`` started together, timed from the capture's start until the replica logs that
  its seed is copied (the source is not written to, so the target then equals it: checked by
  ``migrate verify`` afterwards, not timed); the time until the replica has also read the
  capture's snapshot from the topics (caught up), the steps' timeline, the seed's copy step
  alone and the CPU seconds of each part are in the notes;
- initial copy, rebuilt from the topics (the path without ``--seed-from``): the same, timed
  until the target holds every row;
- cutover downtime: ``bottler migrate cutover`` (in-process) on the seeded pair, the replica
  stopped when the cutover asks; the window from the fence to the verdict;
- verify: ``migrate verify`` of the two identical databases against ``COPY … TO STDOUT`` of the
  table from both databases at once (two connections): reading both sides is verify's floor.

`make bench-migration` (:func:`seeded_sizes`) measures the first two alone, at several sizes.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import make_conninfo

from bottler.migrate import cutover
from bottler.migrate.status import status
from bottler.migrate.verify import verify
from tests.bench import data
from tests.bench.ceilings import drop_slot
from tests.bench.kafka import delete_topics, warm_transactions
from tests.bench.latency import TOPIC_CONFIG
from tests.bench.procs import SNAPSHOT_DONE, CaptureProcess, CpuMeter, cpu_seconds
from tests.bench.replica import ReplicaProcess
from tests.bench.report import Figure, Target

PREFIX = "bench_migrate"
GROUP = "bench-migrate"
SEED_DONE = r"seed: copied (\d+) rows of \d+ tables in ([\d.]+) s"
POLL = 0.1  # seconds between looks at the target's row count (rebuild)
# disk a size of seeded_sizes takes at its peak, per row of ~100 B: the source table and its
# key, the target's copy, the WAL of both, the capture's topic (its snapshot runs meanwhile)
BYTES_PER_ROW = 600


def migration(dsn: str, bootstrap: str, env: dict[str, str], table: str, rows: int,
              cpu_roots: dict[str, int | None]) -> list[Figure]:
    """pg_dump | psql, the seeded initial copy, the rebuild from the topics, the cutover's
    downtime and the verify rate, in that order."""
    dump = _pg_dump(dsn, table, rows)
    seeded, dump, cut, checked = _seeded(dsn, bootstrap, env, table, rows, dump, cpu_roots)
    rebuilt = _rebuilt(dsn, bootstrap, env, table, rows, dump)
    return [dump, seeded, rebuilt, cut, *checked]


def _bracketed(before: Figure, after: Figure, rows: int) -> Figure:
    """pg_dump | psql timed before and after the seeded copy, as one figure (their mean time):
    on a shared machine the load drifts within seconds, and the ratio should not depend on
    which side of the seeded copy a burst of load fell."""
    first, second = rows / before.value, rows / after.value
    took = (first + second) / 2
    return Figure(before.name, rows / took, "rows/s",
                  notes=[f"{rows:,} rows in {took:.1f} s (the mean of {first:.1f} s just before "
                         f"the seeded copy and {second:.1f} s just after it, with the capture "
                         "and the replica idle) (table, rows, primary key), one pipe; the "
                         "initial copy's ceiling"])


def _database(dsn: str, name: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(name)))
        conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
    return make_conninfo(dsn, dbname=name)


def _drop(dsn: str, name: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(
            sql.Identifier(name)))


def _pg_dump(dsn: str, table: str, rows: int) -> Figure:
    say("migration: pg_dump | psql")
    target = _database(dsn, "bench_migrate_dump")
    try:
        start = time.perf_counter()
        dump = subprocess.Popen(["pg_dump", f"--table=public.{table}", "--no-owner",
                                 "--no-privileges", dsn], stdout=subprocess.PIPE)
        subprocess.run(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", target], stdin=dump.stdout,
                       stdout=subprocess.DEVNULL, check=True)
        if dump.wait() != 0:
            raise RuntimeError(f"pg_dump exited with status {dump.returncode}")
        elapsed = time.perf_counter() - start
        _check_count(target, table, rows)
    finally:
        _drop(dsn, "bench_migrate_dump")
    return Figure("pg_dump | psql: the table into a fresh database", rows / elapsed, "rows/s",
                  notes=[f"{rows:,} rows in {elapsed:.1f} s (table, rows, primary key), one "
                         "pipe; the initial copy's ceiling"])


# (process, what, log line): the seeded copy's steps, timed from the capture's start
TIMELINE = [
    ("capture", "capture's first log line", r"."),
    ("capture", "slot created, snapshot exported", r"created slot"),
    ("replica", "replica's first log line", r"."),
    ("replica", "seed's snapshot taken", r"seed: snapshot at"),
    ("replica", "seed's primary key built", r"primary key built in (?P<took>[\d.]+) s"),
    ("replica", "seed's table copied", r"seed: \S+: \d+ rows copied"),
    ("replica", "seed done", SEED_DONE),
]


def timeline(start: float, procs: dict) -> str:
    """When each step of TIMELINE happened, in seconds after ``start``."""
    steps = []
    for name, what, pattern in TIMELINE:
        regex = re.compile(pattern)
        found = next(((t, m) for t, line in procs[name].lines if (m := regex.search(line))),
                     None)
        if found is not None:
            took = f" (in {found[1]['took']} s)" if "took" in regex.groupindex else ""
            steps.append(f"{what} {found[0] - start:.1f}{took}")
    return "steps (s after the capture's start): " + ", ".join(steps)


def seeded_sizes(dsn: str, bootstrap: str, env: dict[str, str], sizes: list[int],
                 cpu_roots: dict[str, int | None], where: Path) -> list[Figure]:
    """`make bench-migration`: at each size, ``pg_dump | psql`` and the seeded initial copy
    alone (no rebuild, cutover or verify rate), each on a table of its own, dropped after."""
    need = max(sizes) * BYTES_PER_ROW
    if (free := shutil.disk_usage(where).free) < need:
        raise SystemExit(f"bench: {max(sizes):,} rows need about {need / 2**30:.0f} GB free "
                         f"where the stack runs ({where}), and {free / 2**30:.1f} GB are: free "
                         "some, or give smaller --migration-sizes")
    warm_transactions(bootstrap)
    figures = []
    for rows in sizes:
        table = f"bench_migrate_{rows}"
        say(f"migration at {rows:,} rows: filling {table}")
        data.create_filled(dsn, table, rows)
        try:
            dump = _pg_dump(dsn, table, rows)
            seeded, dump, _, _ = _seeded(dsn, bootstrap, env, table, rows, dump, cpu_roots,
                                         full=False)
        finally:
            data.drop_table(dsn, table)
        figures += [_sized(dump, rows), _sized(seeded, rows)]
    return figures


def _sized(figure: Figure, rows: int) -> Figure:
    return replace(figure, name=f"{figure.name} ({rows:,} rows)")


def seeded_target(rows: int) -> Target:
    """Issue 30: ≥ 1.0× pg_dump | psql at 10M rows (~1 GB), ≥ 0.7× at 1M."""
    return Target(">=", 1.0 if rows >= 10_000_000 else 0.7, of="ratio")


def _seeded(dsn, bootstrap, env, table, rows, dump, cpu_roots, full=True):
    """The seeded copy, bracketed by ``dump`` and a second ``pg_dump | psql``; ``full``: then
    the catch-up with the capture's snapshot, the cutover and the verify rate too, else the
    capture and the replica are stopped once the target is verified (a large table's capture
    snapshot would take minutes)."""
    say("migration: initial copy, seeded (--seed-from)")
    target = _database(dsn, "bench_migrate_seed")
    drop_slot(dsn, PREFIX)
    capture = CaptureProcess("migrate-source", env, [
        "--tables", f"public.{table}", "--slot", PREFIX, "--topic-prefix", PREFIX,
        "--snapshot-workers", "2", *TOPIC_CONFIG])
    replica = ReplicaProcess("migrate-replica", {**env, "BOTTLER_TARGET_DSN": target}, [
        "--topic-prefix", PREFIX, "--group-id", GROUP, "--on-poison", "stop",
        "--seed-from", dsn])
    try:
        meter = CpuMeter(cpu_roots).start()
        capture.start()
        replica.start()
        seeded_at, done = replica.wait_line(SEED_DONE, timeout=600)
        cpu = (meter.note() + f", capture {cpu_seconds(capture.pid):.1f}, replica "
               f"{cpu_seconds(replica.pid):.1f}")
        elapsed = seeded_at - capture.started_at
        steps = timeline(capture.started_at, {"capture": capture, "replica": replica})
        if full:
            capture.wait_line(SNAPSHOT_DONE, timeout=600)
            caught_up = _wait(lambda: status(dsn, target, bootstrap, PREFIX, group=GROUP,
                                             tables=[table]).caught_up, 600)
            followed = (f"; caught up with the capture's snapshot in the topics "
                        f"{caught_up - capture.started_at:.1f} s after the capture's start")
        else:
            followed = ""
        report = verify(dsn, target, tables=[table])
        if not report.identical:
            raise RuntimeError(f"the seeded target differs from the source: {report.tables}")
        if not full:
            replica.stop()
            capture.stop()
        dump = _bracketed(dump, _pg_dump(dsn, table, rows), rows)
        seeded = Figure(
            "initial copy, seeded: capture start → target equal", rows / elapsed, "rows/s",
            ceiling=dump, target=seeded_target(rows),
            notes=[f"{rows:,} rows in {elapsed:.1f} s from the capture's start to the "
                   "replica's 'seed: copied' line (capture and replica started together; "
                   f"verified equal afterwards){followed}",
                   steps, f"the seed's snapshot and COPY alone: {float(done[2]):.1f} s, "
                   f"{rows / dump.value / float(done[2]):.2f}× pg_dump | psql", cpu])
        if not full:
            return seeded, dump, None, []
        cut = _cutover(dsn, target, bootstrap, replica)
        checked = _verify_rate(dsn, target, table, rows)
    finally:
        replica.stop()
        capture.stop()
        drop_slot(dsn, PREFIX)
        delete_topics(bootstrap, f"{PREFIX}.")
        _drop(dsn, "bench_migrate_seed")
    return seeded, dump, cut, checked


def _cutover(dsn: str, target: str, bootstrap: str, replica: ReplicaProcess) -> Figure:
    say("migration: cutover of the seeded pair")
    lines = []

    def said(line: str) -> None:
        lines.append(line)
        if "stop `bottler materialize postgres`" in line:
            threading.Thread(target=replica.stop, daemon=True).start()

    done = cutover.run(cutover.Options(dsn, target, bootstrap, prefix=PREFIX, group=GROUP,
                                       slot=PREFIX), say=said)
    if done.verdict != cutover.GO or done.downtime is None:
        raise RuntimeError(f"cutover said {done.verdict}: {done.reasons}\n" + "\n".join(lines))
    steps = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in done.steps)
    return Figure("cutover: write downtime, fence → go", done.downtime, "s",
                  notes=[f"bottler migrate cutover on the seeded pair, replica stopped when "
                         f"asked; steps: {steps}"])


def _verify_rate(dsn: str, target: str, table: str, rows: int) -> list[Figure]:
    say("migration: verify against COPY TO of both sides")
    elapsed = {}

    def read(side: str, conninfo: str) -> None:
        with psycopg.connect(conninfo) as conn, conn.cursor().copy(
                sql.SQL("copy {} to stdout").format(sql.Identifier(table))) as copy:
            start = time.perf_counter()
            for _ in copy:
                pass
            elapsed[side] = time.perf_counter() - start

    start = time.perf_counter()
    threads = [threading.Thread(target=read, args=a) for a in (("source", dsn),
                                                               ("target", target))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    both = time.perf_counter() - start
    ceiling = Figure("postgres: COPY TO STDOUT of both sides at once", rows / both, "rows/s",
                     notes=[f"{rows:,} rows of each side in {both:.1f} s (source "
                            f"{elapsed['source']:.1f} s, target {elapsed['target']:.1f} s)"])
    start = time.perf_counter()
    report = verify(dsn, target, tables=[table])
    took = time.perf_counter() - start
    if not report.identical:
        raise RuntimeError(f"verify found differences: {report.tables}")
    return [ceiling, Figure("migrate verify: checksums of both sides", rows / took, "rows/s",
                            ceiling=ceiling,
                            notes=[f"{rows:,} rows in {took:.1f} s, identical"])]


def _rebuilt(dsn, bootstrap, env, table, rows, dump) -> Figure:
    say("migration: initial copy, rebuilt from the topics (no --seed-from)")
    target = _database(dsn, "bench_migrate_rebuild")
    drop_slot(dsn, PREFIX)
    capture = CaptureProcess("migrate-source", env, [
        "--tables", f"public.{table}", "--slot", PREFIX, "--topic-prefix", PREFIX,
        "--snapshot-workers", "2", *TOPIC_CONFIG])
    replica = ReplicaProcess("migrate-rebuild", {**env, "BOTTLER_TARGET_DSN": target}, [
        "--topic-prefix", PREFIX, "--group-id", GROUP, "--on-poison", "stop"])
    try:
        capture.start()
        replica.start()
        equal_at = _wait(lambda: _count(target, table) >= rows, 900)
        elapsed = equal_at - capture.started_at
        _check_count(target, table, rows)
    finally:
        replica.stop()
        capture.stop()
        drop_slot(dsn, PREFIX)
        delete_topics(bootstrap, f"{PREFIX}.")
        _drop(dsn, "bench_migrate_rebuild")
    return Figure("initial copy, rebuilt from the topics: capture start → target equal",
                  rows / elapsed, "rows/s", ceiling=dump,
                  notes=[f"{rows:,} rows in {elapsed:.1f} s from the capture's start until the "
                         "target held every row (capture and replica without --seed-from "
                         "started together): the path every other view takes"])


def _count(dsn: str, table: str) -> int:
    try:
        with psycopg.connect(dsn) as conn:
            return conn.execute(sql.SQL("select count(*) from {}").format(
                sql.Identifier(table))).fetchone()[0]
    except psycopg.errors.UndefinedTable:
        return 0


def _check_count(dsn: str, table: str, rows: int) -> None:
    if (n := _count(dsn, table)) != rows:
        raise RuntimeError(f"{table} holds {n:,} rows in the target, not {rows:,}")


def _wait(predicate, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(POLL)
    raise RuntimeError(f"not done after {timeout:.0f} s")


def say(what: str) -> None:
    print(f"bench {time.strftime('%H:%M:%S')}: {what}", file=sys.stderr, flush=True)

