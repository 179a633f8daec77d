"""Raw ceilings: what the services themselves do with no bottler code in the way."""

from __future__ import annotations

import io
import os
import time
import uuid

import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.bench.report import Figure


def broker_produce(bootstrap: str, messages: int = 200_000, size: int = 200) -> Figure:
    """Producing pre-encoded messages with confluent-kafka, acknowledged by the broker."""
    topic = f"bench-raw-{uuid.uuid4().hex[:8]}"
    AdminClient({"bootstrap.servers": bootstrap}).create_topics(
        [NewTopic(topic, num_partitions=4)]
    )[topic].result(timeout=10)
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "batch.size": 1_000_000, "queue.buffering.max.messages": 1_000_000,
    })
    payload = os.urandom(size)
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
    return Figure("broker: produce pre-encoded 200 B messages", messages / elapsed, "msgs/s")


def copy_out(dsn: str, rows: int = 1_000_000) -> Figure:
    """`COPY … TO STDOUT` of a table of ~100 B rows: the snapshot ceiling."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("drop table if exists bench_copy")
        conn.execute(
            "create table bench_copy as select g as id, md5(g::text) as a, "
            "md5((g * 2)::text) as b, now() as t from generate_series(1, %s) g",
            (rows,),
        )
        sink = io.BytesIO()
        start = time.perf_counter()
        with conn.cursor().copy("copy bench_copy to stdout") as copy:
            for chunk in copy:
                sink.write(chunk)
        elapsed = time.perf_counter() - start
        conn.execute("drop table bench_copy")
    return Figure("postgres: COPY TO STDOUT, ~100 B rows", rows / elapsed, "rows/s")
