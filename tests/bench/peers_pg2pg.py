"""The peers bench's PG→PG part (tests/bench/peers.py): each pair copies the source table into
a target database of its own, checked equal by the same checksum (count and the sum of a hash
of every row's text):

- the initial copy to target-equal: ``pg_dump | psql`` (the floor, before and after the
  others); Debezium's connector and its JDBC sink in one Kafka Connect worker (the target table
  created beforehand as the source's), from the worker's start; ``bottler capture`` and
  ``bottler materialize postgres`` started together, from the capture's start, through the
  topics (as Debezium goes) and seeded (``--seed-from``);
- the catch-up of CHANGES changes to target-equal (after its initial copy, for Debezium's pair
  and bottler's through the topics): the pair stopped, the source's rows updated in
  transactions of CHANGE_BATCH, the pair started again and timed from its start until the
  target's last changed row is the source's and the checksums agree.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from tests.bench import connect, data
from tests.bench.ceilings import drop_slot
from tests.bench.kafka import delete_topics, wait_until
from tests.bench.latency import TOPIC_CONFIG
from tests.bench.migration import SEED_DONE, _count, _database, _drop, _pg_dump
from tests.bench.peers_report import Row, Run, say
from tests.bench.procs import CaptureProcess, CpuMeter, cpu_seconds
from tests.bench.replica import ReplicaProcess
from tests.bench.snapshot import DEFAULT_WORKERS

TIMEOUT = 1200  # seconds for any one run
DBZ_NAME = "dbz_peers_pg2pg"  # Debezium's topic prefix, slot and publication
BOTTLER_NAME = "bottler_peers_pg2pg"
CHANGE_BATCH = 10_000  # rows updated per source transaction in the catch-up
CHECKSUM = ("select count(*), coalesce(sum(hashtextextended(format('%s|%s|%s|%s', id, a, b, t), "
            "0)::numeric), 0) from {}")


def pg2pg(ep, env, table: str, rows: int, changes: int, roots, notes: list[str],
          out: Path, converter: dict[str, str] = connect.JSON) -> list[Row]:
    """The PG→PG figures; ``changes`` 0 leaves out the catch-up."""
    dump_s = rows / _pg_dump(ep.pg_dsn, table, rows).value
    say("PG→PG: Debezium's connector + JDBC sink")
    dbz, dbz_up = _debezium(ep, table, rows, changes, roots, out, converter)
    say("PG→PG: bottler capture + materialize postgres, through the topics")
    through, ours_up = _bottler(ep, env, table, rows, changes, roots, seed=False)
    say("PG→PG: bottler capture + materialize postgres --seed-from")
    seeded, _ = _bottler(ep, env, table, rows, 0, roots, seed=True)
    again = rows / _pg_dump(ep.pg_dsn, table, rows).value
    floor = Run((dump_s + again) / 2, rows,
                notes=[f"pg_dump | psql: {dump_s:.1f} s before, {again:.1f} s after the others"])
    runs = (floor, dbz, through, seeded, *((dbz_up, ours_up) if changes else ()))
    notes += ["PG→PG: " + n for r in runs for n in r.notes]
    with psycopg.connect(ep.pg_dsn, autocommit=True) as conn:  # compact again for what follows
        conn.execute(sql.SQL("vacuum full analyze {}").format(sql.Identifier(table)))
    figures = [
        Row("PG→PG initial copy, through Kafka (rows/s)", dbz.rate, through.rate, "rows/s",
            "higher"),
        Row("PG→PG initial copy, bottler seeded (rows/s)", dbz.rate, seeded.rate, "rows/s",
            "higher"),
        Row("PG→PG initial copy, bottler seeded against pg_dump | psql (rows/s; in the "
            "Debezium column: pg_dump | psql)", floor.rate, seeded.rate, "rows/s", "higher",
            peer_name="pg_dump | psql"),
        Row("PG→PG CPU s per 1M rows, through Kafka (tool's processes)", dbz.cpu_per_million,
            through.cpu_per_million, "s", "lower"),
        Row("PG→PG peak RSS, through Kafka (MB)", dbz.rss_mb, through.rss_mb, "MB", "lower"),
    ]
    if changes:
        figures += [
            Row(f"PG→PG catch-up of {changes:,} updates, restart → target equal (changes/s)",
                dbz_up.rate, ours_up.rate, "changes/s", "higher"),
            Row("PG→PG CPU s per 1M changes, catch-up (tool's processes)",
                dbz_up.cpu_per_million, ours_up.cpu_per_million, "s", "lower"),
        ]
    return figures


def checksum(dsn: str, table: str) -> tuple[int, int]:
    with psycopg.connect(dsn) as conn:
        count, total = conn.execute(sql.SQL(CHECKSUM).format(sql.Identifier(table))).fetchone()
    return int(count), int(total)


def _equal_at(source: tuple[int, int], target: str, table: str,
              procs: tuple[CaptureProcess, ...]) -> float:
    """When ``target``'s table held as many rows as the source (while ``procs`` live); then its
    checksum must be the source's."""
    def there() -> bool:
        for proc in procs:
            proc.check_alive()
        return _count(target, table) >= source[0]

    at = wait_until(there, TIMEOUT, f"{table} in the target", every=0.1)
    if (found := checksum(target, table)) != source:
        raise RuntimeError(f"the target's {table} differs from the source: checksum {found} "
                           f"against {source}")
    return at


def _debezium(ep, table, rows, changes, roots, out: Path,
              converter: dict[str, str]) -> tuple[Run, Run | None]:
    target = _database(ep.pg_dsn, "bench_peers_dbz")
    data.create_table(target, table)  # as the source's: the same types, the same checksum
    drop_slot(ep.pg_dsn, DBZ_NAME)
    pg = conninfo_to_dict(ep.pg_dsn)
    jdbc = f"jdbc:postgresql://{pg['host']}:{pg['port']}/bench_peers_dbz"
    worker = connect.ConnectProcess("pg2pg", ep.kafka, {
        "dbz-source": {**connect.SOURCE, **connect.database_settings(ep.pg_dsn),
                       "topic.prefix": DBZ_NAME, "slot.name": DBZ_NAME,
                       "publication.name": DBZ_NAME, "table.include.list": f"public.{table}"},
        "dbz-sink": {**connect.SINK, "topics": f"{DBZ_NAME}.public.{table}",
                     "connection.url": jdbc, "connection.username": pg["user"],
                     "connection.password": pg["password"]},
    }, log=out / "connect-pg2pg.log", converter=converter)
    try:
        source = checksum(ep.pg_dsn, table)  # before the clock: not the tool's time, nor CPU
        meter = CpuMeter(roots).start()
        started = worker.start().started_at
        equal = _equal_at(source, target, table, (worker,))
        cpu = cpu_seconds(worker.pid)
        note = meter.note()
        rss = worker.peak_mb
        up = _catch_up(ep.pg_dsn, target, table, changes, (worker,), roots,
                       "Debezium connector + JDBC sink") if changes else None
        worker.stop()
    finally:
        worker.cleanup()
        _remove(ep, DBZ_NAME, "bench_peers_dbz")
    took = equal - started
    return Run(took, rows, cpu, rss, notes=[
        f"Debezium connector + JDBC sink in one Connect worker: {took:.1f} s from the worker's "
        f"start to the target equal (checksum); JVM CPU {cpu:.1f} s; {note}"]), up


def _bottler(ep, env, table, rows, changes, roots, seed: bool) -> tuple[Run, Run | None]:
    what = "seeded" if seed else "through the topics"
    target = _database(ep.pg_dsn, "bench_peers_bottler")
    drop_slot(ep.pg_dsn, BOTTLER_NAME)
    capture = CaptureProcess("pg2pg", env, [
        "--tables", f"public.{table}", "--slot", BOTTLER_NAME, "--topic-prefix", BOTTLER_NAME,
        "--snapshot-workers", str(DEFAULT_WORKERS), *TOPIC_CONFIG])
    replica = ReplicaProcess("pg2pg-replica", {**env, "BOTTLER_TARGET_DSN": target}, [
        "--topic-prefix", BOTTLER_NAME, "--group-id", BOTTLER_NAME, "--on-poison", "stop",
        *(["--seed-from", ep.pg_dsn] if seed else [])])
    up = None
    try:
        source = checksum(ep.pg_dsn, table)  # before the clock: not the tool's time, nor CPU
        meter = CpuMeter(roots).start()
        capture.start()
        replica.start()
        started = capture.started_at
        if seed:
            equal = replica.wait_line(SEED_DONE, timeout=TIMEOUT)[0]
            _equal_at(source, target, table, (capture, replica))
        else:
            equal = _equal_at(source, target, table, (capture, replica))
        cpu = cpu_seconds(capture.pid) + cpu_seconds(replica.pid)
        note = meter.note()
        rss = capture.peak_mb + capture.workers_peak_mb + replica.peak_mb
        if changes:
            up = _catch_up(ep.pg_dsn, target, table, changes, (capture, replica), roots,
                           "bottler capture + materialize postgres")
    finally:
        replica.stop()
        capture.stop()
        _remove(ep, BOTTLER_NAME, "bench_peers_bottler")
    took = equal - started
    return Run(took, rows, cpu, rss, notes=[
        f"bottler capture + materialize postgres, {what}: {took:.1f} s from the capture's start "
        f"to the target equal (checksum); capture and replica CPU {cpu:.1f} s, peak RSS "
        f"{rss:.0f} MB (capture + its workers + replica, each VmHWM); {note}"]), up


def _remove(ep, name: str, database: str) -> None:
    """What one tool's PG→PG run left: its slot, its topics, its target database."""
    drop_slot(ep.pg_dsn, name)
    delete_topics(ep.kafka, f"{name}.")
    _drop(ep.pg_dsn, database)


def _catch_up(dsn, target, table, changes, procs, roots, who: str) -> Run:
    """Stop ``procs`` (a pair, its target equal), update ``changes`` rows of the source, start
    them again and time them until the target equals the source."""
    for proc in procs:
        proc.stop()
    say(f"PG→PG: {changes:,} updates on the source while {who} is stopped")
    last = _update(dsn, table, changes)
    source = checksum(dsn, table)
    meter = CpuMeter(roots).start()
    for proc in procs:
        proc.start()
    equal = _changed_at(dsn, target, table, last, source, procs)
    cpu = sum(cpu_seconds(proc.pid) for proc in procs)
    took = equal - procs[0].started_at
    return Run(took, changes, cpu, notes=[
        f"{who}, catch-up: {changes:,} updates (transactions of {CHANGE_BATCH:,} rows) made "
        f"while stopped; {took:.1f} s from its start again to the target equal (checksum); "
        f"its CPU {cpu:.1f} s; {meter.note()}"])


def _update(dsn: str, table: str, changes: int) -> int:
    """Update ``changes`` rows (each row's ``a`` hashed again), id by id from 1 in transactions
    of CHANGE_BATCH (round again past the last id); the id changed last."""
    update = sql.SQL("update {} set a = md5(a) where id between %s and %s").format(
        sql.Identifier(table))
    with psycopg.connect(dsn, autocommit=True) as conn:
        top = conn.execute(sql.SQL("select max(id) from {}").format(
            sql.Identifier(table))).fetchone()[0]
        lo, left = 1, changes
        while left > 0:
            hi = min(lo + min(left, CHANGE_BATCH) - 1, top)
            conn.execute(update, (lo, hi))  # autocommit: one transaction per statement
            left -= hi - lo + 1
            last, lo = hi, hi + 1 if hi < top else 1
    return last


def _changed_at(dsn, target, table, last, source, procs) -> float:
    """When the target's row ``last`` held the source's (the change made last), and then the
    target's checksum the source's (checked again each second, should it not at first)."""
    probe = sql.SQL("select a from {} where id = %s").format(sql.Identifier(table))
    with psycopg.connect(dsn) as conn:
        wanted = conn.execute(probe, (last,)).fetchone()[0]

    def changed() -> bool:
        for proc in procs:
            proc.check_alive()
        with psycopg.connect(target) as conn:
            row = conn.execute(probe, (last,)).fetchone()
        return row is not None and row[0] == wanted

    at = wait_until(changed, TIMEOUT, f"the change to {table} id {last} in the target",
                    every=0.1)
    if checksum(target, table) == source:
        return at
    return wait_until(lambda: checksum(target, table) == source, TIMEOUT,
                      f"the target's {table} equal to the source's", every=1)
