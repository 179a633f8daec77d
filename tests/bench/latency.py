"""Commit-to-Kafka latency under a steady write load: writer threads commit single-row inserts
at a paced rate while the capture streams; a consumer in its own process reads each row's
message. The capture's topic has ``message.timestamp.type=LogAppendTime`` (passed with -T), so
every message carries the moment the broker appended it: latency = that − the commit.

Each writer sends its due inserts as one simple-protocol round trip of
``begin; insert …; commit;`` groups, one transaction per row. Each row's commit lies between
the writer's clock before it sent the round trip and after it returned; the figures take the
first (so they are, if at all, overstated by up to the round trip), the notes give the second.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import threading
import time
import uuid
from collections.abc import Callable

import psycopg
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, Consumer, TopicPartition
from psycopg import sql

from tests.bench.procs import CaptureProcess, CpuMeter
from tests.bench.report import Figure, Target

TOPIC_CONFIG = ("-T", "message.timestamp.type=LogAppendTime")  # for the capture's topics
WRITERS = 4  # connections sharing the rate
TICK = 0.005  # seconds between a writer's batches
MAX_BATCH = 25  # rows per round trip at most, should a writer fall behind
DRAIN_TIMEOUT = 60  # seconds for the last messages to arrive


def start_observer(target, args: tuple, total: int, seconds: float, what: str):
    """Run ``target(*args, total, ready, results, timeout)`` in its own process, which watches
    for the load's ``total`` rows; return it and its results queue once it is ready."""
    ctx = mp.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=target, args=(
        *args, total, ready, results, seconds + DRAIN_TIMEOUT + 30,
    ), daemon=True)
    proc.start()
    if not ready.wait(60):
        raise RuntimeError(f"the {what} did not start")
    return proc, results


def latency(dsn: str, bootstrap: str, table: str, topic: str, first_id: int, rate: float,
            seconds: float, capture: CaptureProcess, cpu_roots: dict[str, int | None],
            key_id: Callable[[bytes], int] | None = None, who: str = "capture") -> list[Figure]:
    """``key_id`` reads a row's id from its message's key (a module-level function: the
    consumer's process imports it); the capture's Avro key by default. ``who`` names the
    process streaming the rows (``capture``) in the CPU note."""
    total = int(rate * seconds)
    consumer, results = start_observer(consume, (bootstrap, topic, first_id, key_id or avro_id),
                                       total, seconds, "latency consumer")
    meter = CpuMeter({**cpu_roots, who: capture.pid}).start()
    committed, started, ended = write(dsn, table, first_id, total, rate)
    cpu = meter.note()
    arrived = results.get(timeout=seconds + DRAIN_TIMEOUT + 60)
    consumer.join(10)
    capture.check_alive()

    seen = [(committed[i], arrived[i]) for i in committed if i in arrived]
    if not seen:
        raise RuntimeError("no message of the latency run reached the consumer")
    if any(kind != TIMESTAMP_LOG_APPEND_TIME for _, (_, kind, _) in seen):
        raise RuntimeError(f"{topic} does not carry LogAppendTime timestamps")
    appended = sorted(stamp - sent * 1000 for (sent, _), (_, _, stamp) in seen)
    after_commit = sorted(stamp - done * 1000 for (_, done), (_, _, stamp) in seen)
    consumed = sorted((at - sent) * 1000 for (sent, _), (at, _, _) in seen)
    round_trips = sorted((done - sent) * 1000 for sent, done in committed.values())
    achieved = len(committed) / (ended - started)
    load = (f"{len(committed):,} single-row insert transactions from {WRITERS} connections at "
            f"{achieved:,.0f}/s (asked {rate:,.0f}/s) for {ended - started:.1f} s; "
            f"{len(committed) - len(seen)} never arrived; writer round trips p50 "
            f"{_pct(round_trips, 50):.1f} ms, p99 {_pct(round_trips, 99):.1f} ms")
    return [
        Figure("latency load: insert commits/s achieved by the writer", achieved, "changes/s",
               target=Target(">=", rate * 0.95), notes=[load, cpu]),
        Figure("latency commit → broker append, p50", _pct(appended, 50), "ms"),
        Figure("latency commit → broker append, p99", _pct(appended, 99), "ms",
               target=Target("<", 200),
               notes=[f"max {appended[-1]:.0f} ms, mean {statistics.fmean(appended):.1f} ms, "
                      "from the writer's clock before its round trip to the broker's "
                      "LogAppendTime; from its clock after the commit returned: p50 "
                      f"{_pct(after_commit, 50):.1f} ms, p99 {_pct(after_commit, 99):.1f} ms; "
                      f"until a consumer (fetch.wait.max.ms=5) has it: p50 "
                      f"{_pct(consumed, 50):.1f} ms, p99 {_pct(consumed, 99):.1f} ms"]),
    ]


def _pct(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p / 100))]


# -- the writer -------------------------------------------------------------------------------

def write(dsn: str, table: str, first_id: int, total: int, rate: float, per_commit: int = 1):
    """Commit ``total`` rows at ``rate`` rows/s, ``per_commit`` rows per transaction; return
    {id: (wall clock before its round trip, after it)}, the start and the end (monotonic)."""
    committed: dict[int, tuple[float, float]] = {}
    errors: list[BaseException] = []
    start = time.monotonic() + 0.2  # all writers start together
    ids = list(range(first_id, first_id + total))
    threads = [
        threading.Thread(target=_writer, args=(
            dsn, table, ids[w::WRITERS], rate / WRITERS, per_commit, start, committed, errors))
        for w in range(WRITERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return committed, start, time.monotonic()


def _writer(dsn, table, ids, rate, per_commit, start, committed, errors) -> None:
    insert = sql.SQL("insert into {} values ").format(sql.Identifier(table))
    row = "({0}, md5('{0}'), md5('{1}'), now())"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            head = "begin; " + insert.as_string(conn)
            sent = 0
            while sent < len(ids):
                now = time.monotonic()
                due = min(int((now - start) * rate) + 1, len(ids)) - sent
                if due <= 0:
                    time.sleep(min(TICK, start + (sent + 1) / rate - now))
                    continue
                batch = ids[sent:sent + min(max(due, per_commit), MAX_BATCH * per_commit)]
                query = "".join(
                    head + ", ".join(row.format(i, i * 2) for i in batch[t:t + per_commit])
                    + "; commit;"
                    for t in range(0, len(batch), per_commit)
                ).encode()
                before = time.time()
                conn.execute(query)
                after = time.time()
                for i in batch:
                    committed[i] = (before, after)
                sent += len(batch)
    except BaseException as exc:  # noqa: BLE001 - handed to the main thread
        errors.append(exc)


# -- the consumer (its own process, so its timing does not share our GIL) -------------------------

def consume(bootstrap, topic, first_id, key_id, total, ready, results, timeout) -> None:
    """Put {id: (wall clock on arrival, timestamp type, timestamp ms)} of the messages of rows
    id ≥ first_id on ``results``."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-latency-{uuid.uuid4().hex[:8]}",
        "log_level": 4,
        "enable.auto.commit": False, "fetch.wait.max.ms": 5, "fetch.min.bytes": 1,
    })
    partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
    start = [TopicPartition(topic, p, consumer.get_watermark_offsets(
        TopicPartition(topic, p), timeout=10)[1]) for p in partitions]
    consumer.assign(start)
    consumer.poll(0.5)  # connected and fetching before the writer starts
    ready.set()
    arrived: dict[int, tuple[float, int]] = {}
    deadline = time.monotonic() + timeout
    while len(arrived) < total and time.monotonic() < deadline:
        for msg in consumer.consume(1000, 0.1):
            now = time.time()
            if msg.error() or msg.key() is None:
                continue
            row_id = key_id(msg.key())
            if row_id >= first_id and row_id not in arrived:
                arrived[row_id] = (now, *msg.timestamp())
    consumer.close()
    results.put(arrived)


def avro_id(key: bytes) -> int:
    """The capture's key: Confluent's framing (magic byte, schema id), then the record."""
    return _avro_int(key, 5)


def _avro_int(buf: bytes, pos: int) -> int:
    """The zig-zag varint at ``pos``: the key record's only field, the int id."""
    shift = value = 0
    while True:
        b = buf[pos]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1)
        shift += 7
        pos += 1
