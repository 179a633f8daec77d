"""Business-event translators: the broker's transactions they rely on, the shipped orders
example (its rules, then a scripted order lifecycle through a real capture), loading by name,
dead letters and a restart that restores the keyed state."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from decimal import Decimal

import httpx
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from common.errors import BottlerError
from compose.demo import seed
from compose.procs import free_port
from materializers.core import TableId
from materializers.translators import Event, Output, RowChange, Source, Translator
from materializers.translators.examples import orders
from materializers.translators.loading import load
from tests.support.databases import execute
from tests.support.topics import read_committed
from tests.support.translate import ORDERS, Events, running
from tests.support.waiting import wait_for, wait_streaming

# -- the broker ------------------------------------------------------------------------------

def test_the_broker_hides_aborted_transactions_and_commits_offsets_with_them(stack):
    topic, group = f"tx-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    admin.create_topics([NewTopic(topic, 1)])[topic].result(30)
    consumer = Consumer({"bootstrap.servers": stack.kafka, "group.id": group})
    producer = Producer({"bootstrap.servers": stack.kafka, "transactional.id": group})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, b"aborted", b"k")
    producer.flush(30)
    producer.abort_transaction(30)
    producer.begin_transaction()
    producer.produce(topic, b"committed", b"k")
    producer.send_offsets_to_transaction([TopicPartition(topic, 0, 1)],
                                         consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    try:
        assert [m.value() for m in read_committed(stack.kafka, topic)] == [b"committed"]
        assert [m.value() for m in read_committed(stack.kafka, topic, "read_uncommitted")] == [
            b"aborted", b"committed"]
        assert consumer.committed([TopicPartition(topic, 0)], 30)[0].offset == 1
    finally:
        consumer.close()


# -- the orders example, as a function ------------------------------------------------------

def row(id_=1, status="placed", **fields):
    return {"id": id_, "customer_id": 7, "status": status, "total": Decimal("12.50"),
            "placed_at": 1_000_000, "paid_at": None, "shipped_at": None, "note": None, **fields}


def change(new, before=None, op=None):
    op = op or ("delete" if new is None else "update" if before else "insert")
    return RowChange(TableId("public", "orders"), op, {"id": 1}, new, before,
                     Source("orders", 0, 5, timestamp=2_000, commit_time=None))


def kinds(events):
    return [e.type for e in events]


def test_the_orders_example_keeps_business_changes_and_drops_the_noise():
    translate = orders.translate
    placed = translate(change(row()))
    assert kinds(placed) == ["OrderPlaced"]
    assert placed[0].key == {"order_id": 1} and placed[0].topic == "order-events"
    assert placed[0].value == {"order_id": 1, "occurred_at": 1_000_000, "customer_id": 7,
                               "total": Decimal("12.50"), "note": None}
    assert translate(change(row(note="gift"), row())) == []  # a note: noise
    assert translate(change(row(total=Decimal("13")), row())) == []
    assert translate(change(row(), row())) == []  # a replayed row
    paid = translate(change(row(status="paid", paid_at=3_000_000), row()))
    assert kinds(paid) == ["OrderPaid"] and paid[0].value["occurred_at"] == 3_000_000
    assert kinds(translate(change(row(status="shipped"), row(status="paid")))) == [
        "OrderShipped"]
    assert kinds(translate(change(row(status="shipped"), row()))) == ["OrderPaid",
                                                                       "OrderShipped"]
    assert kinds(translate(change(row(status="shipped")))) == [  # first seen already shipped
        "OrderPlaced", "OrderPaid", "OrderShipped"]
    cancelled = translate(change(row(status="cancelled"), row(status="paid")))
    assert kinds(cancelled) == ["OrderCancelled"]
    assert cancelled[0].value == {"order_id": 1, "occurred_at": 2_000_000,  # the Kafka time
                                  "previous_status": "paid"}
    assert kinds(translate(change(row(status="cancelled")))) == ["OrderPlaced",
                                                                  "OrderCancelled"]
    assert translate(change(row(status="cancelled"), row(status="cancelled"))) == []
    assert translate(change(row(status="paid"), row(status="shipped"))) == []  # a correction
    assert translate(change(row(status="placed"), row(status="cancelled"))) == []
    assert translate(change(None, row(), op="delete")) == []
    with pytest.raises(ValueError, match="unknown status 'lost'"):
        translate(change(row(status="lost")))
    with pytest.raises(ValueError, match="total of 'NaN'"):
        translate(change(row(total="NaN")))


def test_translators_are_found_by_module_and_attribute():
    assert load("materializers.translators.examples.orders:translator") is orders.translator
    assert load("tests.support.translate:factory") is orders.translator
    with pytest.raises(BottlerError, match="no translator named 'nope'"):
        load("nope")
    with pytest.raises(BottlerError, match="cannot import no_such_module"):
        load("no_such_module:x")
    with pytest.raises(BottlerError, match="not a Translator"):
        load("materializers.translators.examples.orders:TOPIC")
    with pytest.raises(ValueError, match="no input topics"):
        Translator("t", [], [Output("o", "long", "long")], lambda c: [])


# -- end to end ------------------------------------------------------------------------------


LIFECYCLE = [
    "insert into orders (id, customer_id, total) values (1, 10, 25.00)",
    "update orders set note = 'ring twice' where id = 1",  # noise
    "update orders set status = 'paid', paid_at = now() where id = 1",
    "update orders set total = 26.00 where id = 1",  # noise
    "update orders set status = 'shipped', shipped_at = now() where id = 1",
    "insert into orders (id, customer_id, total) values (2, 11, 9.99)",
    "update orders set status = 'cancelled' where id = 2",
    "update orders set status = 'placed' where id = 2",  # a correction: no event
    "insert into orders (id, customer_id, status, total, paid_at, shipped_at)"
    " values (3, 12, 'shipped', 5.00, now(), now())",
    "delete from orders where id = 3",  # no event
    "insert into orders (id, customer_id, total) values (4, 13, 'NaN')",  # untranslatable
    "insert into orders (id, customer_id, total) values (5, 14, 1.00)",
]
EXPECTED = {
    1: ["OrderPlaced", "OrderPaid", "OrderShipped"],
    2: ["OrderPlaced", "OrderCancelled"],
    3: ["OrderPlaced", "OrderPaid", "OrderShipped"],
    5: ["OrderPlaced"],
}


def test_a_scripted_order_lifecycle_becomes_business_events_and_survives_a_restart(
        stack, source, prefix, start):
    execute(source, ORDERS)
    start()
    wait_streaming(source, prefix)
    events = Events(stack, f"{prefix}.order-events")
    group = f"g-{uuid.uuid4().hex[:8]}"
    with running(stack, prefix, group_id=group) as (runner, failure):
        execute(source, *LIFECYCLE)
        assert events.wait(9, failure) == EXPECTED
    decoded = events.decoded()
    placed = next(v for k, kind, v in decoded if k == 1 and kind == "OrderPlaced")
    assert placed["customer_id"] == 10 and placed["total"] == Decimal("25.00")
    assert placed["note"] is None  # as placed, before the note
    shipped = next(v for k, kind, v in decoded if k == 1 and kind == "OrderShipped")
    assert shipped["occurred_at"] > placed["occurred_at"]
    first = events.messages()[0]
    assert first.key() is not None
    headers = dict(first.headers())
    assert headers["bottler.source.topic"] == f"{prefix}.orders".encode()
    assert int(headers["bottler.source.offset"]) >= 0

    dead = read_committed(stack.kafka, f"{prefix}._bottler.dead-letter")
    assert len(dead) == 1
    reasons = dict(dead[0].headers())
    assert reasons["bottler.error"] == b"ValueError"
    assert b"total of 'NaN'" in reasons["bottler.reason"]
    assert reasons["bottler.materializer"] == group.encode()

    # A new process of the same group resumes after the committed offsets, with the state.
    execute(source, "update orders set status = 'cancelled' where id = 1",
            "update orders set note = 'late' where id = 5",
            "update orders set status = 'paid' where id = 5")
    with running(stack, prefix, group_id=group) as (runner, failure):
        by_order = events.wait(11, failure)
        wait_for(lambda: failure or runner.caught_up.is_set(), 30, "the translator to catch up")
    assert by_order == EXPECTED | {1: EXPECTED[1] + ["OrderCancelled"],
                                   5: ["OrderPlaced", "OrderPaid"]}
    assert len(events.messages()) == 11  # nothing translated twice
    state = read_committed(stack.kafka, f"{prefix}._bottler.state.{group}")
    assert {m.key() for m in state} >= {f"{prefix}.orders\n{{\"id\":1}}".encode()}


def test_a_translator_that_fails_stops_under_the_stop_policy(stack, source, prefix, start):
    execute(source, ORDERS, "insert into orders (id, customer_id, total) values (1, 1, 1)")

    def explode(change):
        if change.row and change.row["customer_id"] == 2:
            raise RuntimeError("no customer 2 here")
        return [Event("out", {"order_id": change.key["id"]}, {"n": change.row["id"]})]

    failing = Translator("failing", ["orders"], [
        Output("out", orders.KEY_SCHEMA,
               {"type": "record", "name": "N", "fields": [{"name": "n", "type": "long"}]})],
        explode)
    start()
    wait_streaming(source, prefix)
    stopped = pytest.raises(BottlerError, match=r"orders\[0\]@1: RuntimeError: no customer 2")
    with stopped, running(stack, prefix, failing, on_poison="stop") as (_, failure):
        wait_for(lambda: failure or read_committed(stack.kafka, f"{prefix}.out"), 60, "event")
        execute(source, "insert into orders (id, customer_id, total) values (2, 2, 1)",
                "insert into orders (id, customer_id, total) values (3, 3, 1)")
        wait_for(lambda: failure, 30, "the translator to stop")
    assert len(read_committed(stack.kafka, f"{prefix}.out")) == 1  # 3 is after the stop


def metric(port: int, name: str, **labels: str) -> float | None:
    want = [f'{k}="{v}"' for k, v in labels.items()]
    try:
        text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    except httpx.HTTPError:  # not serving yet
        return None
    for line in text.splitlines():
        if line.startswith(f"{name} ") or (
                line.startswith(f"{name}{{") and all(w in line for w in want)):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_demo_shop_as_make_up_runs_it(stack, source, prefix, start, tmp_path):
    """The seeded shop's 5000 orders (a quarter each placed, paid, shipped, cancelled) through
    `bottler translate` as a process, ready once its metrics answer, stopped by SIGTERM."""
    seed(source)
    start()
    port = free_port()
    log = tmp_path / "translate.log"
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "bottler", "translate",
             "materializers.translators.examples.orders:translator", "--topic-prefix", prefix,
             "--metrics-port", str(port)],
            env={**os.environ, "BOTTLER_KAFKA": stack.kafka,
                 "BOTTLER_REGISTRY": stack.registry_url},
            stdout=out, stderr=subprocess.STDOUT)
    try:
        group = f"{prefix}.bottler-translate-orders"
        wait_for(lambda: process.poll() is not None or metric(
            port, "bottler_translator_events_total", translator=group) == 10_000, 120,
            "10000 events")
        assert process.poll() is None, log.read_text()[-2000:]
        assert metric(port, "bottler_materializer_caught_up", materializer=group) == 1.0
        assert metric(port, "bottler_translator_state_rows", translator=group) == 5000
    finally:
        process.terminate()
        assert process.wait(30) == 0, log.read_text()[-2000:]
    counts: dict[str, int] = {}
    for _, kind, _ in Events(stack, f"{prefix}.order-events").decoded():
        counts[kind] = counts.get(kind, 0) + 1
    assert counts == {"OrderPlaced": 5000, "OrderPaid": 2500, "OrderShipped": 1250,
                      "OrderCancelled": 1250}
