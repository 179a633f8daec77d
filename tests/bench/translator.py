"""A translator (the shipped orders example) against reading its input topic with nothing else:

- raw ceiling: a plain consumer reads the orders topic from the start to its end, counting the
  messages (no decoding, nothing produced);
- translate: a :class:`TranslatorRunner` of ``examples/orders.py`` from zero until caught up,
  timed from its start to its return: consuming, decoding, the keyed state, translating, and
  producing the events, the state's changelog and the offsets in one Kafka transaction per
  batch.

The input is a capture snapshot of an ``orders`` table of N paid orders (each gives
``OrderPlaced`` and ``OrderPaid``), not timed.
"""

from __future__ import annotations

import os
import time
import uuid

import psycopg
from confluent_kafka import Consumer, KafkaError, TopicPartition

from materializers.translators.examples import orders
from materializers.translators.runner import TranslatorRunner
from tests.bench.ceilings import drop_slot
from tests.bench.kafka import TopicWatch, delete_topics
from tests.bench.procs import SNAPSHOT_DONE, CaptureProcess, CpuMeter, running
from tests.bench.report import Figure

PREFIX = "bench_translate"
TABLE = "orders"
ORDERS = """
create table orders (
    id bigint primary key, customer_id bigint not null, status text not null,
    total numeric(12, 2) not null, placed_at timestamptz not null, paid_at timestamptz,
    shipped_at timestamptz, note text
)"""


def translator(dsn: str, bootstrap: str, env: dict[str, str], rows: int,
               cpu_roots: dict[str, int | None], say=print) -> list[Figure]:
    topic = f"{PREFIX}.{TABLE}"
    say(f"translator: {rows:,} paid orders, captured into {topic}")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop table if exists orders cascade")
        conn.execute(ORDERS)
        conn.execute("insert into orders select g, g %% 1000, 'paid', (g %% 10000) / 100.0, "
                     "now(), now(), null, null from generate_series(1, %s) g", (rows,))
    drop_slot(dsn, PREFIX)
    capture = CaptureProcess("translator-source", env, [
        "--tables", f"public.{TABLE}", "--slot", PREFIX, "--topic-prefix", PREFIX])
    try:
        with running(capture):
            capture.wait_line(SNAPSHOT_DONE, timeout=600)
        say("translator: raw ceiling, reading the topic")
        ceiling = _read(bootstrap, topic, rows, cpu_roots)
        say("translator: the orders translator from zero")
        return [ceiling, _translate(bootstrap, env["BOTTLER_REGISTRY"], rows, ceiling,
                                    cpu_roots)]
    finally:
        drop_slot(dsn, PREFIX)
        delete_topics(bootstrap, f"{PREFIX}.")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("drop table if exists orders cascade")


def _read(bootstrap: str, topic: str, rows: int, cpu_roots) -> Figure:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        meter = CpuMeter({**cpu_roots, "reader (this process)": os.getpid()}).start()
        start = time.perf_counter()
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        pending, count = set(partitions), 0
        deadline = time.monotonic() + 300
        while pending:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic}: no end of partitions {pending} within 300 s")
            # a short timeout: consume() waits for the whole batch otherwise
            for msg in consumer.consume(10_000, timeout=0.1):
                if msg.error() is None:
                    count += 1
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                else:
                    raise RuntimeError(f"reading {topic}: {msg.error()}")
        elapsed = time.perf_counter() - start
        cpu = meter.note()
    finally:
        consumer.close()
    if count != rows:
        raise RuntimeError(f"{topic} holds {count:,} messages, not {rows:,}")
    return Figure("kafka: read the orders topic, nothing else", rows / elapsed, "msgs/s",
                  notes=[f"{rows:,} messages read from the start to the end of every partition "
                         f"by one confluent-kafka consumer, not decoded: {elapsed:.1f} s", cpu])


def _translate(bootstrap: str, registry: str, rows: int, ceiling: Figure, cpu_roots) -> Figure:
    runner = TranslatorRunner(orders.translator, bootstrap=bootstrap, registry=registry,
                              topic_prefix=PREFIX, group_id=f"{PREFIX}-{uuid.uuid4().hex[:8]}",
                              on_poison="stop")
    meter = CpuMeter({**cpu_roots, "translator (this process)": os.getpid()}).start()
    start = time.perf_counter()
    runner.run_until_caught_up(timeout=900)
    elapsed = time.perf_counter() - start
    cpu = meter.note()
    watch = TopicWatch(bootstrap, f"{PREFIX}.{orders.TOPIC}")
    offsets = watch.end()  # events plus one transaction marker per batch and partition
    watch.close()
    if offsets < 2 * rows:
        raise RuntimeError(f"{PREFIX}.{orders.TOPIC} holds {offsets:,} offsets, fewer than "
                           f"the {2 * rows:,} events expected")
    return Figure("translator (orders example) from zero: consume → events, caught up",
                  rows / elapsed, "changes/s", ceiling=ceiling,
                  notes=[f"{rows:,} order rows, {2 * rows:,} events (OrderPlaced, OrderPaid) "
                         f"in {elapsed:.1f} s, in this process, batches of "
                         f"{runner.batch_size} changes, one Kafka transaction each (events, "
                         "state changelog, offsets); the events topic's offsets checked", cpu])
