"""Commit-to-Kafka latency under a steady write load: writer threads commit single-row inserts
at a paced rate while the capture streams; a consumer in its own process notes when each row's
message arrives. Latency = arrival (consumer) − the writer's clock after its commit returned.

Each writer sends its due inserts as one simple-protocol round trip of
``begin; insert …; commit;`` groups, one transaction per row, so the commit time it notes is
late by at most that round trip (a millisecond or two): latencies are if anything understated
by that much.
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import threading
import time
import uuid

import psycopg
from confluent_kafka import Consumer, TopicPartition
from psycopg import sql

from tests.bench.procs import CaptureProcess, CpuMeter
from tests.bench.report import Figure, Target

WRITERS = 2  # connections sharing the rate
TICK = 0.005  # seconds between a writer's batches
MAX_BATCH = 25  # rows per round trip at most, should a writer fall behind
DRAIN_TIMEOUT = 60  # seconds for the last messages to arrive


def latency(dsn: str, bootstrap: str, table: str, topic: str, first_id: int, rate: float,
            seconds: float, capture: CaptureProcess,
            cpu_roots: dict[str, int | None]) -> list[Figure]:
    ctx = mp.get_context("spawn")
    ready, results = ctx.Event(), ctx.Queue()
    total = int(rate * seconds)
    consumer = ctx.Process(target=consume, args=(
        bootstrap, topic, first_id, total, ready, results, seconds + DRAIN_TIMEOUT + 30,
    ), daemon=True)
    consumer.start()
    if not ready.wait(60):
        raise RuntimeError("the latency consumer did not start")
    meter = CpuMeter({**cpu_roots, "capture": capture.pid}).start()
    committed, started, ended = write(dsn, table, first_id, total, rate)
    cpu = meter.note()
    arrived = results.get(timeout=seconds + DRAIN_TIMEOUT + 60)
    consumer.join(10)
    capture.check_alive()

    achieved = len(committed) / (ended - started)
    lags = sorted(
        (arrived[i][0] - t) * 1000 for i, (t, _) in committed.items() if i in arrived
    )
    stamp_lags = sorted(
        arrived[i][1] - wall * 1000 for i, (_, wall) in committed.items() if i in arrived
    )
    missing = len(committed) - len(lags)
    if not lags:
        raise RuntimeError("no message of the latency run reached the consumer")
    p50, p99 = _pct(lags, 50), _pct(lags, 99)
    load = (f"{len(committed):,} single-row insert transactions from {WRITERS} connections at "
            f"{achieved:,.0f}/s (asked {rate:,.0f}/s) for {ended - started:.1f} s; "
            f"{missing} never arrived")
    return [
        Figure("latency load: insert commits/s achieved by the writer", achieved, "changes/s",
               target=Target(">=", rate * 0.95), notes=[load, cpu]),
        Figure("latency commit → consumer sees it, p50", p50, "ms"),
        Figure("latency commit → consumer sees it, p99", p99, "ms", target=Target("<", 200),
               notes=[f"max {lags[-1]:.0f} ms, mean {statistics.fmean(lags):.1f} ms; "
                      "to the message's timestamp (CreateTime: when the capture produced it) "
                      f"p50 {_pct(stamp_lags, 50):.1f} ms, p99 {_pct(stamp_lags, 99):.1f} ms"]),
    ]


def _pct(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(len(sorted_values) * p / 100))]


# -- the writer -------------------------------------------------------------------------------

def write(dsn: str, table: str, first_id: int, total: int, rate: float):
    """Commit ``total`` rows at ``rate``/s; return {id: (monotonic, wall) after its commit},
    the start and the end (monotonic)."""
    committed: dict[int, tuple[float, float]] = {}
    errors: list[BaseException] = []
    start = time.monotonic() + 0.2  # all writers start together
    ids = list(range(first_id, first_id + total))
    threads = [
        threading.Thread(target=_writer, args=(
            dsn, table, ids[w::WRITERS], rate / WRITERS, start, committed, errors))
        for w in range(WRITERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return committed, start, time.monotonic()


def _writer(dsn, table, ids, rate, start, committed, errors) -> None:
    stmt = sql.SQL(
        "begin; insert into {} values ({{0}}, md5('{{0}}'), md5('{{1}}'), now()); commit;"
    ).format(sql.Identifier(table))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            template = stmt.as_string(conn)
            sent = 0
            while sent < len(ids):
                now = time.monotonic()
                due = min(int((now - start) * rate) + 1, len(ids)) - sent
                if due <= 0:
                    time.sleep(min(TICK, start + (sent + 1) / rate - now))
                    continue
                batch = ids[sent:sent + min(due, MAX_BATCH)]
                conn.execute("".join(template.format(i, i * 2) for i in batch).encode())
                mono, wall = time.monotonic(), time.time()
                for i in batch:
                    committed[i] = (mono, wall)
                sent += len(batch)
    except BaseException as exc:  # noqa: BLE001 - handed to the main thread
        errors.append(exc)


# -- the consumer (its own process, so its timing does not share our GIL) -------------------------

def consume(bootstrap, topic, first_id, total, ready, results, timeout) -> None:
    """Put {id: (monotonic arrival, message timestamp ms)} of rows id ≥ first_id on results."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-latency-{uuid.uuid4().hex[:8]}",
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
            now = time.monotonic()
            if msg.error() or msg.key() is None:
                continue
            row_id = _avro_int(msg.key(), 5)  # Confluent framing: magic byte + schema id
            if row_id >= first_id and row_id not in arrived:
                arrived[row_id] = (now, msg.timestamp()[1])
    consumer.close()
    results.put(arrived)


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
