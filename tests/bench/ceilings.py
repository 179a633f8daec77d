"""Raw ceilings: what the services themselves do with no bottler code in the way."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import threading
import time
import uuid

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from common.lsn import Lsn
from compose.postgres import find_bin_dir
from tests.bench import data
from tests.bench.procs import CpuMeter
from tests.bench.report import Figure

PROTO = ("-o", "proto_version=1")  # what the capture asks pgoutput for


def broker_produce(bootstrap: str, broker_pid: int | None = None, messages: int = 200_000,
                   size: int = 200) -> Figure:
    """Producing pre-encoded messages with confluent-kafka, acknowledged by the broker."""
    topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the topic exists
    admin.create_topics([NewTopic(topic, num_partitions=4)])[topic].result(timeout=10)
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
    })
    payload = os.urandom(size)
    meter = CpuMeter({"broker": broker_pid, "this process": os.getpid()}).start()
    start = time.perf_counter()
    for i in range(messages):
        while True:
            try:
                producer.produce(topic, key=str(i % 10_000).encode(), value=payload)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(60) == 0, "broker did not acknowledge every message"
    elapsed = time.perf_counter() - start
    cpu = meter.note()
    admin.delete_topics([topic])[topic].result(timeout=60)  # see kafka.delete_topics
    return Figure("broker: produce pre-encoded 200 B messages", messages / elapsed, "msgs/s",
                  notes=[f"{messages:,} messages, 4 partitions, idempotent, no delivery callback",
                         cpu])


def copy_out(dsn: str, table: str, rows: int) -> Figure:
    """`COPY … TO STDOUT` of the snapshot's table: the snapshot ceiling."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        sink = io.BytesIO()
        start = time.perf_counter()
        with conn.cursor().copy(
            sql.SQL("copy {} to stdout").format(sql.Identifier(table))
        ) as copy:
            for chunk in copy:
                sink.write(chunk)
        elapsed = time.perf_counter() - start
    return Figure("postgres: COPY TO STDOUT, one connection", rows / elapsed, "rows/s",
                  notes=[f"{rows:,} rows, {sink.tell() / rows:.0f} B of COPY text per row"])


# -- decode: pg_recvlogical with pgoutput ------------------------------------------------------

def recvlogical() -> str:
    """The pg_recvlogical next to the server binaries, else the one on PATH."""
    try:
        candidate = find_bin_dir() / "pg_recvlogical"
        if candidate.exists():
            return str(candidate)
    except Exception:  # noqa: BLE001 - fall back to PATH
        pass
    found = shutil.which("pg_recvlogical")
    if not found:
        raise RuntimeError("pg_recvlogical not found (Debian: apt-get install postgresql-client)")
    return found


def _client(dsn: str) -> tuple[list[str], dict[str, str]]:
    """pg_recvlogical's -d argument, with the password moved to PGPASSWORD."""
    params = conninfo_to_dict(dsn)
    password = params.pop("password", None)
    env = {**os.environ, **({"PGPASSWORD": password} if password else {})}
    return ["-d", make_conninfo(**params)], env


def _new_slot(dsn: str, table: str, slot: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("drop publication if exists {}").format(sql.Identifier(slot)))
        conn.execute(sql.SQL("create publication {} for table {}").format(
            sql.Identifier(slot), sql.Identifier(table)))
        conn.execute("select pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))


def drop_slot(dsn: str, slot: str) -> None:
    """Drop the slot and the publication named after it (as the capture names its own), if
    they exist: an idle slot retains WAL, and a publication left behind would be reused as it
    is by the next capture of that name, with the wrong tables."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for attempt in range(50):  # a stopped client's walsender may hold it a moment longer
            try:
                conn.execute("select pg_drop_replication_slot(slot_name) from "
                             "pg_replication_slots where slot_name = %s", (slot,))
                break
            except psycopg.errors.ObjectInUse:
                if attempt == 49:
                    raise
                time.sleep(0.2)
        conn.execute(sql.SQL("drop publication if exists {}").format(sql.Identifier(slot)))


def decode_catch_up(dsn: str, table: str, rows: int, transactions: int) -> Figure:
    """Rows inserted while a pgoutput slot exists and nobody reads it; then `pg_recvlogical
    --endpos <WAL end> -f /dev/null` decodes them all: timed from its start to its exit."""
    slot = "bench_raw_catch_up"
    data.create_table(dsn, table)
    _new_slot(dsn, table, slot)
    _, end = data.fill(dsn, table, 1, rows, transactions)
    conn_args, env = _client(dsn)
    argv = [recvlogical(), *conn_args, "--slot", slot, "--start", "--no-loop",
            "--endpos", str(Lsn(end)), "-f", "/dev/null", *PROTO,
            "-o", f"publication_names={slot}"]
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    elapsed = time.perf_counter() - start
    drop_slot(dsn, slot)
    return Figure("decode ceiling, catch-up: pg_recvlogical --endpos → /dev/null",
                  rows / elapsed, "rows/s",
                  notes=[f"{rows:,} rows in {transactions} transaction(s) written before "
                         f"pg_recvlogical starts; {elapsed:.1f} s from its start to its exit"])


def decode_live(dsn: str, table: str, rows: int, transactions: int) -> Figure:
    """pg_recvlogical already streaming while the rows are inserted, as a running capture is:
    timed from the first commit until a marker emitted after the last one comes out."""
    slot = "bench_raw_live"
    marker = f"bench-end-{uuid.uuid4().hex}".encode()
    data.create_table(dsn, table)
    _new_slot(dsn, table, slot)
    conn_args, env = _client(dsn)
    argv = [recvlogical(), *conn_args, "--slot", slot, "--start", "--no-loop", "-f", "-",
            *PROTO, "-o", f"publication_names={slot}", "-o", "messages=true"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    seen = threading.Event()
    seen_at = [0.0]

    def watch() -> None:  # read the decoded stream (as /dev/null would) until the marker
        tail = b""
        while chunk := proc.stdout.read1(1 << 20):
            if marker in tail + chunk:
                seen_at[0] = time.monotonic()
                seen.set()
            tail = chunk[-len(marker):]

    threading.Thread(target=watch, daemon=True).start()
    try:
        _wait_active(dsn, slot, proc)
        first_commit, _ = data.fill(dsn, table, 1, rows, transactions)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("select pg_logical_emit_message(false, 'bench', %s)", (marker.decode(),))
        if not seen.wait(300):
            raise RuntimeError("pg_recvlogical did not decode the end marker within 300 s")
    finally:
        proc.terminate()
        proc.wait(30)
    drop_slot(dsn, slot)
    elapsed = seen_at[0] - first_commit
    return Figure("decode ceiling, live: pg_recvlogical streaming during the insert",
                  rows / elapsed, "rows/s",
                  notes=[f"{rows:,} rows in {transactions} transaction(s) inserted while "
                         f"pg_recvlogical streams; {elapsed:.1f} s from the commit to the "
                         "decoded end marker (the server decodes into its reorder buffer while "
                         "the insert runs, so less is left after the commit)"])


def _wait_active(dsn: str, slot: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"pg_recvlogical exited: {proc.stderr.read().decode()}")
            active = conn.execute(
                "select active from pg_replication_slots where slot_name = %s", (slot,)
            ).fetchone()
            if active and active[0]:
                return
            time.sleep(0.05)
    raise RuntimeError(f"pg_recvlogical did not start streaming from {slot}")
