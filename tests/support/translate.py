"""The orders translator in tests: the orders table, its business events as a read_committed
consumer sees them, the translator running in a thread, a slow one for a child process to be
killed mid-transaction, a write load of order lifecycles and the events it implies."""

from __future__ import annotations

import random
import threading
import time
from contextlib import contextmanager
from dataclasses import replace

import psycopg
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from materializers.translators.examples import orders
from materializers.translators.runner import TranslatorRunner
from tests.support.databases import rows
from tests.support.topics import read_committed
from tests.support.waiting import in_thread, wait_for

ORDERS = """
create table orders (
    id          bigint primary key,
    customer_id bigint not null,
    status      text not null default 'placed'
                check (status in ('placed', 'paid', 'shipped', 'cancelled')),
    total       numeric(12, 2) not null default 0,
    placed_at   timestamptz not null default now(),
    paid_at     timestamptz,
    shipped_at  timestamptz,
    note        text
);
"""


def factory():
    return orders.translator


class Events:
    """The business events of a topic as a read_committed consumer sees them."""

    def __init__(self, stack, topic: str):
        self.stack, self.topic = stack, topic
        registry = SchemaRegistryClient({"url": stack.registry_url})
        self._key = AvroDeserializer(registry)
        self._value = AvroDeserializer(registry, return_record_name=True)

    def messages(self):
        return read_committed(self.stack.kafka, self.topic)

    def decoded(self):
        out = []
        for msg in self.messages():
            key = self._key(msg.key(), SerializationContext(self.topic, MessageField.KEY))
            kind, value = self._value(msg.value(),
                                      SerializationContext(self.topic, MessageField.VALUE))
            out.append((key["order_id"], kind.rsplit(".", 1)[-1], value))
        return out

    def by_order(self) -> dict[int, list[str]]:
        lifecycle: dict[int, list[str]] = {}
        for order_id, kind, _ in self.decoded():
            lifecycle.setdefault(order_id, []).append(kind)
        return lifecycle

    def wait(self, count: int, failure=()):
        def enough():
            if failure:
                raise failure[0]
            return len(self.messages()) >= count

        wait_for(enough, 60, f"{count} events in {self.topic}")
        return self.by_order()


@contextmanager
def running(stack, prefix, translator=orders.translator, **options):
    runner = TranslatorRunner(translator, bootstrap=stack.kafka, registry=stack.registry_url,
                              topic_prefix=prefix, batch_timeout=0.1, **options)
    with in_thread(runner.run) as failure:
        yield runner, failure


SLOW_CHANGE = 0.004  # seconds per change: a batch of 50 is a transaction open for ~0.2 s


def slow_translate(change):
    time.sleep(SLOW_CHANGE)
    return orders.translate(change)


slow = replace(orders.translator, translate=slow_translate)  # what the child process runs


def expected_lifecycles(dsn: str) -> dict[int, list[str]]:
    """The events each order's final status implies: the load only moves orders along
    placed → paid → shipped, or from placed to cancelled."""
    implied = {"placed": [], "paid": ["OrderPaid"], "shipped": ["OrderPaid", "OrderShipped"],
               "cancelled": ["OrderCancelled"]}
    return {order_id: ["OrderPlaced", *implied[status]]
            for order_id, status in rows(dsn, "select id, status from orders")}


def write_load(dsn: str, stop: threading.Event, seed: int = 7) -> int:
    """Orders placed and moved along their lifecycle, with noise (note updates), one
    statement per transaction, until ``stop``; returns the number of orders."""
    rng = random.Random(seed)
    live: dict[int, str] = {}
    next_id = 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            if len(live) < 20 or rng.random() < 0.3:
                conn.execute("insert into orders (id, customer_id, total) values (%s, %s, %s)",
                             (next_id, next_id % 97, rng.randint(100, 99999) / 100))
                live[next_id] = "placed"
                next_id += 1
            else:
                order_id = rng.choice(list(live))
                status = live[order_id]
                move = rng.random()
                if move < 0.35:
                    conn.execute("update orders set note = %s where id = %s",
                                 (f"note {rng.random():.6f}", order_id))
                elif status == "placed" and move < 0.5:
                    conn.execute("update orders set status = 'cancelled' where id = %s",
                                 (order_id,))
                    del live[order_id]
                elif status == "placed":
                    conn.execute("update orders set status = 'paid', paid_at = now() "
                                 "where id = %s", (order_id,))
                    live[order_id] = "paid"
                else:
                    conn.execute("update orders set status = 'shipped', shipped_at = now() "
                                 "where id = %s", (order_id,))
                    del live[order_id]
            time.sleep(0.002)
    return next_id - 1
