"""`make bench-peers`: bottler side by side with the incumbents on this machine, one after the
other on the same table of ROWS rows (~100 B) and the same embedded stack's broker (issue 30):

- PG→PG, the initial copy to target-equal, each checked by the same checksum (count and the sum
  of a hash of every row's text) against the source:
  - ``pg_dump | psql`` (tests/bench/migration.py), the floor;
  - Debezium's PostgreSQL connector and its JDBC sink in one Kafka Connect worker (the target
    table created beforehand as the source's), from the worker's start;
  - ``bottler capture`` and ``bottler materialize postgres`` started together, from the
    capture's start: through the topics (as Debezium goes), and seeded (``--seed-from``);
- capture against capture:
  - snapshot: Debezium's connector with a fresh slot, from the worker's start until the topic
    holds every row; ``bottler capture`` with a fresh slot, from its start until its snapshot
    line (written once Kafka acknowledged every row);
  - streaming catch-up: both stopped, ROWS more rows inserted in one transaction, each resumed
    in turn: from its start (and from its "streaming" log line) until its topic holds them;
  - the CPU seconds of each process from its start until done, per 1M rows (the broker's and
    Postgres's apart), and each process's peak RSS (VmHWM).

Debezium's settings are listed in the report (tests/bench/connect.py WORKER, SOURCE and SINK
below). See docs/benchmarks.md "Against Debezium".
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from rich.console import Console
from rich.table import Table

from compose import jars
from compose.stack import isolated_stack
from tests.bench import connect, data
from tests.bench.ceilings import drop_slot
from tests.bench.kafka import TopicWatch, delete_topics, wait_until
from tests.bench.latency import TOPIC_CONFIG
from tests.bench.migration import SEED_DONE, _database, _drop, _pg_dump
from tests.bench.procs import CaptureProcess, CpuMeter, cpu_seconds
from tests.bench.replica import ReplicaProcess
from tests.bench.report import _cell, code_line, machine_line
from tests.bench.snapshot import DEFAULT_WORKERS, DONE

ROWS = 1_000_000
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

# Debezium's PostgreSQL connector, tuned for throughput as its documentation advises.
SOURCE = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "tasks.max": "1",
    "plugin.name": "pgoutput",
    "publication.autocreate.mode": "filtered",
    "snapshot.mode": "initial",
    "max.batch.size": "20480",  # default 2048
    "max.queue.size": "81920",  # default 8192; at least max.batch.size × 4
    "poll.interval.ms": "50",  # default 500
    "snapshot.fetch.size": "20480",  # default 10240
    "topic.creation.default.replication.factor": "1",
    "topic.creation.default.partitions": "1",
}
# Debezium's JDBC sink: upserts keyed by the record key, batches as large as one poll.
SINK = {
    "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
    "tasks.max": "1",
    "insert.mode": "upsert",
    "primary.key.mode": "record_key",
    "delete.enabled": "true",
    "schema.evolution": "none",
    "batch.size": "10000",  # default 500
    "collection.name.format": "${source.table}",
}
CHECKSUM = ("select count(*), coalesce(sum(hashtextextended(format('%s|%s|%s|%s', id, a, b, t), "
            "0)::numeric), 0) from {}")


@dataclass
class Run:
    """One tool's run of one measurement."""

    seconds: float  # to done
    rows: int
    cpu: float | None = None  # the tool's processes, from their start to done
    rss_mb: float | None = None
    from_line: float | None = None  # rows/s from its own log line for the start of the work
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.rows / self.seconds

    @property
    def cpu_per_million(self) -> float | None:
        return None if self.cpu is None else self.cpu * 1e6 / self.rows


@dataclass
class Row:
    """A line of the side-by-side table: the peer's figure, bottler's and their ratio."""

    what: str
    peer: float
    ours: float
    unit: str
    better: str  # "higher" or "lower"

    @property
    def ratio(self) -> float:
        return self.ours / self.peer


def say(what: str) -> None:
    print(f"bench-peers {time.strftime('%H:%M:%S')}: {what}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.peers", description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows of the table [{ROWS:,}]")
    parser.add_argument("--out", type=Path, default=REPORT, metavar="DIR",
                        help=f"where the report (peers.md) goes [{REPORT}]")
    parser.add_argument("--skip-pg2pg", action="store_true", help="capture against capture only")
    args = parser.parse_args(argv)
    # SIGTERM (a timeout, ^C's cousin) unwinds as an exception: the stack, the slots and
    # Connect's directory are cleaned up by the finally blocks
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench-peers: terminated"))
    rows = args.rows
    for old in args.out.glob("connect-*.log"):
        old.unlink()
    header = [code_line(), versions(), machine_line() + " at the start"]
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
        if not args.skip_pg2pg:
            table += _pg2pg(ep, env, rows, roots, notes, args.out)
            header.append(machine_line() + " after PG→PG")
        table += _capture(ep, env, rows, roots, notes, stack.root, args.out)
    header.append(machine_line() + f" at the end; {time.monotonic() - started:.0f} s in all")
    print_table(table, header, notes)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "peers.md"
    path.write_text(markdown(table, header, notes))
    say(f"report written to {path}")


# -- PG→PG -------------------------------------------------------------------------------------

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


def _count(dsn: str, table: str) -> int:
    try:
        with psycopg.connect(dsn) as conn:
            return conn.execute(sql.SQL("select count(*) from {}").format(
                sql.Identifier(table))).fetchone()[0]
    except psycopg.errors.UndefinedTable:
        return 0


def _pg2pg(ep, env, rows, roots, notes, out: Path) -> list[Row]:
    source = checksum(ep.pg_dsn, TABLE)
    dump = _pg_dump(ep.pg_dsn, TABLE, rows)
    dump_s = rows / dump.value
    say("PG→PG: Debezium's connector + JDBC sink")
    dbz = _debezium_pg2pg(ep, rows, source, roots, out)
    say("PG→PG: bottler capture + materialize postgres, through the topics")
    through = _bottler_pg2pg(ep, env, rows, source, roots, seed=False)
    say("PG→PG: bottler capture + materialize postgres --seed-from")
    seeded = _bottler_pg2pg(ep, env, rows, source, roots, seed=True)
    again = rows / _pg_dump(ep.pg_dsn, TABLE, rows).value
    floor = Run((dump_s + again) / 2, rows,
                notes=[f"pg_dump | psql: {dump_s:.1f} s before, {again:.1f} s after the others"])
    notes += ["PG→PG: " + n for r in (floor, dbz, through, seeded) for n in r.notes]
    return [
        Row("PG→PG initial copy, through Kafka (rows/s)", dbz.rate, through.rate, "rows/s",
            "higher"),
        Row("PG→PG initial copy, bottler seeded (rows/s)", dbz.rate, seeded.rate, "rows/s",
            "higher"),
        Row("PG→PG initial copy, bottler seeded against pg_dump | psql (rows/s; in the "
            "Debezium column: pg_dump | psql)", floor.rate,
            seeded.rate, "rows/s", "higher"),
        Row("PG→PG CPU s per 1M rows, through Kafka (tool's processes)", dbz.cpu_per_million,
            through.cpu_per_million, "s", "lower"),
        Row("PG→PG peak RSS, through Kafka (MB)", dbz.rss_mb, through.rss_mb, "MB", "lower"),
    ]


def _debezium_pg2pg(ep, rows, source, roots, out: Path) -> Run:
    name = f"{DBZ_PREFIX}_pg2pg"
    target = _database(ep.pg_dsn, "bench_peers_dbz")
    data.create_table(target, TABLE)  # as the source's: the same types, the same checksum
    drop_slot(ep.pg_dsn, name)
    pg = conninfo_to_dict(ep.pg_dsn)
    jdbc = f"jdbc:postgresql://{pg['host']}:{pg['port']}/bench_peers_dbz"
    worker = connect.ConnectProcess("pg2pg", ep.kafka, {
        "dbz-source": {**SOURCE, **_database_settings(ep.pg_dsn), "topic.prefix": name,
                       "slot.name": name, "publication.name": name,
                       "table.include.list": f"public.{TABLE}"},
        "dbz-sink": {**SINK, "topics": f"{name}.public.{TABLE}", "connection.url": jdbc,
                     "connection.username": pg["user"], "connection.password": pg["password"]},
    }, log=out / "connect-pg2pg.log")
    try:
        meter = CpuMeter(roots).start()
        worker.start()
        equal = _equal_at(source, target, TABLE, (worker,))
        cpu = cpu_seconds(worker.pid)
        note = meter.note()
        worker.stop()
    finally:
        worker.cleanup()
        drop_slot(ep.pg_dsn, name)
        delete_topics(ep.kafka, f"{name}.")
        _drop(ep.pg_dsn, "bench_peers_dbz")
    took = equal - worker.started_at
    return Run(took, rows, cpu, worker.peak_mb, notes=[
        f"Debezium connector + JDBC sink in one Connect worker: {took:.1f} s from the worker's "
        f"start to the target equal (checksum); JVM CPU {cpu:.1f} s; {note}"])


def _bottler_pg2pg(ep, env, rows, source, roots, seed: bool) -> Run:
    what = "seeded" if seed else "through the topics"
    name = f"{BOTTLER_PREFIX}_pg2pg"
    target = _database(ep.pg_dsn, "bench_peers_bottler")
    drop_slot(ep.pg_dsn, name)
    capture = CaptureProcess("pg2pg", env, [
        "--tables", f"public.{TABLE}", "--slot", name, "--topic-prefix", name,
        "--snapshot-workers", str(DEFAULT_WORKERS), *TOPIC_CONFIG])
    replica = ReplicaProcess("pg2pg-replica", {**env, "BOTTLER_TARGET_DSN": target}, [
        "--topic-prefix", name, "--group-id", name, "--on-poison", "stop",
        *(["--seed-from", ep.pg_dsn] if seed else [])])
    try:
        meter = CpuMeter(roots).start()
        capture.start()
        replica.start()
        if seed:
            equal = replica.wait_line(SEED_DONE, timeout=TIMEOUT)[0]
            _equal_at(source, target, TABLE, (capture, replica))
        else:
            equal = _equal_at(source, target, TABLE, (capture, replica))
        cpu = cpu_seconds(capture.pid) + cpu_seconds(replica.pid)
        note = meter.note()
    finally:
        replica.stop()
        capture.stop()
        drop_slot(ep.pg_dsn, name)
        delete_topics(ep.kafka, f"{name}.")
        _drop(ep.pg_dsn, "bench_peers_bottler")
    took = equal - capture.started_at
    rss = capture.peak_mb + capture.workers_peak_mb + replica.peak_mb
    return Run(took, rows, cpu, rss, notes=[
        f"bottler capture + materialize postgres, {what}: {took:.1f} s from the capture's start "
        f"to the target equal (checksum); capture and replica CPU {cpu:.1f} s, peak RSS "
        f"{rss:.0f} MB (capture + its workers + replica, each VmHWM); {note}"])


def _database_settings(dsn: str) -> dict[str, str]:
    pg = conninfo_to_dict(dsn)
    return {"database.hostname": pg["host"], "database.port": str(pg["port"]),
            "database.user": pg["user"], "database.password": pg["password"],
            "database.dbname": pg["dbname"]}


# -- capture against capture -------------------------------------------------------------------

def _capture(ep, env, rows, roots, notes, root: Path, out: Path) -> list[Row]:
    dbz_topic = f"{DBZ_PREFIX}.public.{TABLE}"
    ours_topic = f"{BOTTLER_PREFIX}.{TABLE}"
    for slot in (DBZ_PREFIX, BOTTLER_PREFIX):
        drop_slot(ep.pg_dsn, slot)
    worker = connect.ConnectProcess("capture", ep.kafka, {"dbz-source": {
        **SOURCE, **_database_settings(ep.pg_dsn), "topic.prefix": DBZ_PREFIX,
        "slot.name": DBZ_PREFIX, "publication.name": DBZ_PREFIX,
        "table.include.list": f"public.{TABLE}"}}, log=out / "connect-capture.log")
    capture = CaptureProcess("capture", env, [
        "--tables", f"public.{TABLE}", "--slot", BOTTLER_PREFIX, "--topic-prefix",
        BOTTLER_PREFIX, "--snapshot-workers", str(DEFAULT_WORKERS), *TOPIC_CONFIG])
    try:
        say("capture: Debezium snapshot")
        dbz_snap = _timed(worker, ep.kafka, dbz_topic, rows, rows, roots, SNAPSHOT_DBZ)
        say("capture: bottler snapshot")
        ours_snap = _timed(capture, ep.kafka, ours_topic, rows, rows, roots, SNAPSHOT_BOTTLER,
                           done_line=DONE)
        say(f"capture: {rows:,} more rows in one transaction, both stopped")
        data.fill(ep.pg_dsn, TABLE, rows + 1, rows)
        say("capture: Debezium catch-up")
        dbz_up = _timed(worker, ep.kafka, dbz_topic, 2 * rows, rows, roots, STREAMING_DBZ)
        say("capture: bottler catch-up")
        ours_up = _timed(capture, ep.kafka, ours_topic, 2 * rows, rows, roots,
                         STREAMING_BOTTLER)
        sizes = {t: _bytes_per_message(root, ep.kafka, t) for t in (dbz_topic, ours_topic)}
    finally:
        worker.cleanup()
        capture.stop()
        for slot in (DBZ_PREFIX, BOTTLER_PREFIX):
            drop_slot(ep.pg_dsn, slot)
        delete_topics(ep.kafka, f"{DBZ_PREFIX}.")
        delete_topics(ep.kafka, f"{BOTTLER_PREFIX}.")
    for who, runs in (("Debezium", (dbz_snap, dbz_up)), ("bottler", (ours_snap, ours_up))):
        notes += [f"capture, {who}: " + n for r in runs for n in r.notes]
    notes.append("bytes per message as stored (key + value, lz4 batches, from the topic's "
                 "log segments): " + ", ".join(f"{t} {b:,.0f}" for t, b in sizes.items()))
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


# -- the report --------------------------------------------------------------------------------

def versions() -> str:
    """The peers' versions, as pinned in compose/jars/pom.xml."""
    pom = jars.POM.read_text()

    def pin(name: str) -> str:
        found = re.search(rf"<{re.escape(name)}>([^<]+)</", pom)
        return found[1] if found else "?"

    return (f"peers: Debezium PostgreSQL connector {pin('debezium.version')} (pgoutput), "
            f"Debezium JDBC sink {pin('debezium.jdbc.version')}, Kafka Connect standalone "
            f"{pin('connect.version')}, JSON converter with schemas (no Avro: see "
            "docs/benchmarks.md); broker Apache Kafka " + pin("kafka.version"))


def _settings_lines() -> list[str]:
    hidden = ("password",)
    lines = []
    for name, settings in (("Connect worker", connect.WORKER), ("Debezium source", SOURCE),
                           ("Debezium JDBC sink", SINK)):
        shown = ", ".join(f"{k}={v}" for k, v in settings.items()
                          if not any(h in k for h in hidden))
        lines.append(f"{name}: {shown}")
    lines.append("Connect JVM: " + " ".join(connect.JVM_OPTIONS))
    return lines


def _fmt(value: float | None, unit: str) -> str:
    if value is None or value != value:
        return "—"
    return f"{value:,.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"


def print_table(rows: list[Row], header: list[str], notes: list[str]) -> None:
    console = Console() if sys.stdout.isatty() else Console(width=160)
    table = Table(title="bottler against Debezium (Kafka Connect standalone)",
                  title_justify="left")
    for col in ("figure", "Debezium", "bottler", "bottler ÷ Debezium", "better"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for r in rows:
        table.add_row(r.what, _fmt(r.peer, r.unit), _fmt(r.ours, r.unit), f"{r.ratio:.2f}×",
                      r.better)
    for line in header:
        console.print(line, highlight=False)
    console.print(table)
    for line in notes + _settings_lines():
        console.print("- " + line, highlight=False, soft_wrap=True)


def markdown(rows: list[Row], header: list[str], notes: list[str]) -> str:
    lines = ["# bottler against Debezium", ""] + [f"- {h}" for h in header] + [""]
    lines += ["| figure | Debezium | bottler | bottler ÷ Debezium | better |",
              "|---|--:|--:|--:|---|"]
    lines += [f"| {_cell(r.what)} | {_fmt(r.peer, r.unit)} | {_fmt(r.ours, r.unit)} | "
              f"{r.ratio:.2f}× | {r.better} |" for r in rows]
    lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines += ["", "## Settings", ""] + [f"- {s}" for s in _settings_lines()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
