"""The materializer core: the Change model, the reference memory sink, lag tracking, and the
consumer loop end to end against the real broker and registry (fed by the real capture, and by
hand-made messages where a test needs an exact order or a broken message). The behaviours every
loop shares (truncate barriers, poison, lost log ends, refusals at flush, broker restarts) are
asserted against each loop in test_core_behaviour.py."""

from __future__ import annotations

import threading
import time
import uuid
from decimal import Decimal

import pytest
from confluent_kafka import Producer

from materializers.core import (
    Change,
    LagTracker,
    Materializer,
    MemorySink,
    TableId,
    freeze,
    table_of,
)
from schemas.avro_schema import record_schemas
from tests.support.databases import execute, rows
from tests.support.loops import Topic, committed, ids
from tests.support.topics import read_topic, topic_state
from tests.support.waiting import wait_for, wait_streaming

# -- pure parts ------------------------------------------------------------------------


def change(op, key, value=None, offset=0):
    return Change(topic="t", table=TableId("public", "t"), op=op,
                  key=None if key is None else {"id": key}, value=value, partition=0,
                  offset=offset)


def test_table_of_prefers_pg_attributes_and_falls_back_to_names():
    key, value = record_schemas("My Schema", "Order-Items", [], [])
    assert key is None and table_of(value) == TableId("My Schema", "Order-Items")
    assert table_of({"name": "x", "namespace": "s", "pg.schema": "My Schema",
                     "pg.table": "Order-Items"}) == TableId("My Schema", "Order-Items")
    assert table_of({"name": "orders", "namespace": "shop.key"}) == TableId("shop", "orders")
    assert table_of({"name": "public.orders"}) == TableId("public", "orders")
    assert freeze({"b": [1, {"c": 2}], "a": 1}) == (("a", 1), ("b", (1, (("c", 2),))))


def test_memory_sink_applies_in_order_only_on_flush_and_stores_offsets():
    sink = MemorySink()
    assert sink.stored_offsets([("t", 0)]) == {}
    sink.write([change("upsert", 1, {"id": 1, "v": "a"}, 0),
                change("upsert", 2, {"id": 2, "v": "b"}, 1),
                change("upsert", 1, {"id": 1, "v": "last"}, 2),
                change("delete", 2, None, 3)], {("t", 0): 4})
    assert sink.rows("public", "t") == {} and sink.offsets == {}  # not durable yet
    sink.flush()
    assert sink.rows("public", "t") == {(("id", 1),): {"id": 1, "v": "last"}}
    assert sink.offsets == {("t", 0): 4} and sink.writes == 4
    truncate = Change(topic="t", table=TableId("public", "t"), op="truncate", key=None,
                      value=None, partition=0, offset=0, barrier={0: 5})
    sink.write([change("upsert", 3, {"id": 3}, 4), truncate,
                change("upsert", 4, {"id": 4}, 5)], {("t", 0): 6})
    assert sink.stored_offsets([("t", 0)]) == {("t", 0): 4}  # a new session drops staged work
    sink.flush()
    assert sink.rows("public", "t") == {(("id", 1),): {"id": 1, "v": "last"}}
    sink.write([change("upsert", 3, {"id": 3}, 4), truncate,
                change("upsert", 4, {"id": 4}, 5)], {("t", 0): 6})
    sink.flush()
    assert sink.rows("public", "t") == {(("id", 4),): {"id": 4}}
    unkeyed = [change("upsert", None, {"v": 1}, 7), change("upsert", None, {"v": 1}, 8)]
    sink.write(unkeyed + unkeyed, {})  # replayed: still two rows
    sink.flush()
    assert len(sink.rows("public", "t")) == 3


def test_a_barrier_moves_only_the_partitions_not_at_it_and_discovery_lists_what_a_view_reads():
    from types import SimpleNamespace

    from materializers.core.ownership import discover
    from materializers.core.positions import follow

    stand = {("t", 0): 5, ("t", 1): 9, ("t", 2): 3}
    barrier = {("t", 0): 5, ("t", 1): 7, ("t", 2): 4, ("t", 3): 2}
    # at it already: not moved; past it: replayed from it; short of it or unknown: moved on
    assert follow("v", barrier, stand.get, stand) == {("t", 1): 7, ("t", 2): 4, ("t", 3): 2}

    meta = SimpleNamespace(topics={name: SimpleNamespace(partitions={1: None, 0: None})
                                   for name in ("p.a", "p.b", "p._bottler.truncate", "other")})
    client = SimpleNamespace(list_topics=lambda timeout: meta)
    assert discover(client, {"p.b"}.__contains__, "p._bottler.truncate") == [
        ("p._bottler.truncate", 0), ("p._bottler.truncate", 1), ("p.b", 0), ("p.b", 1)]


def test_discovery_with_the_broker_away_is_none_and_any_other_failure_raises():
    from types import SimpleNamespace

    from confluent_kafka import KafkaError, KafkaException

    from materializers.core.ownership import discover_or_none

    def failing(code):
        def list_topics(timeout):
            raise KafkaException(KafkaError(code))
        return SimpleNamespace(list_topics=list_topics)

    assert discover_or_none(failing(KafkaError._TRANSPORT), bool, name="v") is None
    with pytest.raises(KafkaException):
        discover_or_none(failing(KafkaError.TOPIC_AUTHORIZATION_FAILED), bool, name="v")


def test_lag_tracker_caught_up_needs_every_partition_at_its_watermark():
    tracker = LagTracker("unit")
    assert not tracker.check()  # nothing assigned is not caught up
    tracker.assign({("a", 0): 0, ("a", 1): 5})
    tracker.observe(("a", 0), 0, 10)
    assert tracker.lag() == {("a", 0): 10, ("a", 1): None}
    tracker.observe(("a", 1), 0, 5)
    assert not tracker.check() and not tracker.caught_up.is_set()
    tracker.advance(("a", 0), 10)
    assert tracker.check() and tracker.caught_up.is_set()
    assert tracker.lag() == {("a", 0): 0, ("a", 1): 0}
    assert tracker.totals() == (15, 15)


# -- end to end, hand-made messages -------------------------------------------------------


def test_last_value_wins_deletes_and_resume_without_reapplying(stack):
    topic = Topic(stack)
    for i in range(30):
        topic.put(1, f"v{i}")
    topic.put(2, "two")
    topic.put(3, "three")
    topic.put(3, None)  # tombstone
    sink = MemorySink()
    materializer = topic.materializer(sink, batch_size=7)
    materializer.run_until_caught_up(timeout=60)
    assert ids(sink) == {1: "v29", 2: "two"}
    assert materializer.lag() == {(topic.name, 0): 0, (topic.truncates, 0): 0}
    assert sink.offsets[(topic.name, 0)] == 33 and sink.flushes >= 5  # batches of 7
    assert committed(stack, materializer.group_id, topic.name) == 33
    writes = sink.writes

    again = topic.materializer(sink, group=materializer.group_id)
    again.run_until_caught_up(timeout=60)
    assert sink.writes == writes  # resumed from the stored offsets: nothing re-applied
    topic.put(2, None)
    topic.put(4, "four")
    again.run_until_caught_up(timeout=60)
    assert ids(sink) == {1: "v29", 4: "four"} and sink.writes == writes + 2


def test_failed_flush_aborts_the_commit_and_the_next_run_reapplies(stack):
    class FlakySink(MemorySink):
        failures = 1

        def flush(self):
            if self.failures:
                self.failures -= 1
                raise OSError("disk full")
            super().flush()

    topic = Topic(stack)
    for i in range(10):
        topic.put(i, f"v{i}")
    sink = FlakySink()
    materializer = topic.materializer(sink)
    with pytest.raises(OSError, match="disk full"):
        materializer.run_until_caught_up(timeout=60)
    assert sink.offsets == {} and ids(sink) == {}
    assert committed(stack, materializer.group_id, topic.name) < 0  # nothing committed
    topic.materializer(sink, group=materializer.group_id).run_until_caught_up(timeout=60)
    assert ids(sink) == {i: f"v{i}" for i in range(10)}
    assert committed(stack, materializer.group_id, topic.name) == 10


def test_a_batch_is_applied_while_the_next_is_read_one_sink_call_at_a_time(stack):
    class SlowSink(MemorySink):
        """Flushes take a while; refuses a call while another is running; fails flush 3."""

        def __init__(self, fail_at=None):
            super().__init__()
            self.fail_at = fail_at
            self.batches = 0
            self.threads = set()
            self.busy = threading.Lock()

        def write(self, changes, offsets):
            assert self.busy.acquire(blocking=False), "two sink calls at once"
            try:
                self.batches += 1
                self.threads.add(threading.current_thread().name)
                super().write(changes, offsets)
            finally:
                self.busy.release()

        def flush(self):
            assert self.busy.acquire(blocking=False), "two sink calls at once"
            try:
                time.sleep(0.05)
                if self.batches == self.fail_at:
                    raise OSError("disk full")
                super().flush()
            finally:
                self.busy.release()

    topic = Topic(stack)
    for i in range(40):
        topic.put(i, f"v{i}")
    sink = SlowSink(fail_at=3)
    materializer = topic.materializer(sink, batch_size=5)  # full batches: behind, overlapped
    with pytest.raises(OSError, match="disk full"):
        materializer.run_until_caught_up(timeout=60)
    assert sink.batches == 3  # the batch read meanwhile was never written
    assert sink.offsets == {(topic.name, 0): 10} and set(ids(sink)) == set(range(10))
    assert any(name.startswith(materializer.name + "-apply") for name in sink.threads)

    again = SlowSink()
    again.offsets, again.tables = sink.offsets, sink.tables  # the durable state
    topic.materializer(again, group=materializer.group_id, batch_size=5).run_until_caught_up(
        timeout=60)
    assert ids(again) == {i: f"v{i}" for i in range(40)}
    assert again.offsets[(topic.name, 0)] == 40


def test_lag_is_known_while_running_and_caught_up_is_waitable(stack):
    topic = Topic(stack)
    for i in range(200):
        topic.put(i)
    materializer = topic.materializer(MemorySink(), batch_size=10, progress=True)  # bar on
    stop = threading.Event()
    thread = threading.Thread(target=materializer.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert materializer.caught_up.wait(60)
        assert materializer.lag()[(topic.name, 0)] == 0
        topic.put(500)
        topic.producer.flush(30)
        wait_for(lambda: len(materializer.sink.rows("public", "t")) == 201, 30, "row 500")
    finally:
        stop.set()
        thread.join(30)
    assert not thread.is_alive()


# -- end to end, fed by the real capture ---------------------------------------------------

SHOP = """
create table items (id int primary key, name text not null, price numeric(10,2));
insert into items select g, 'item ' || g, g * 1.5 from generate_series(1, 100) g;
"""


def source_items(dsn) -> dict:
    return {r[0]: {"id": r[0], "name": r[1], "price": r[2]}
            for r in rows(dsn, "select id, name, price from items")}


def sink_items(sink) -> dict:
    return {k[0][1]: v for k, v in sink.rows("public", "items").items()}


def test_rebuild_from_a_capture_equals_the_source_and_follows_truncates(stack, source, prefix,
                                                                         start):
    execute(source, SHOP)
    start()
    wait_streaming(source, prefix)
    execute(source, *[f"update items set name = 'n{i}' where id = 1" for i in range(20)],
            "delete from items where id between 90 and 100",
            "update items set price = 0.01 where id = 2")
    topic_state(stack, f"{prefix}.items", 89)

    def rebuild(sink, group=None):
        materializer = Materializer(sink, bootstrap=stack.kafka, registry=stack.registry_url,
                                    group_id=group or f"g-{uuid.uuid4().hex[:8]}", prefix=prefix,
                                    batch_timeout=0.2, progress=False)
        materializer.run_until_caught_up(timeout=60)
        return materializer

    running = MemorySink()
    materializer = rebuild(running)
    assert sink_items(running) == source_items(source)
    assert sink_items(running)[1]["name"] == "n19"
    assert sink_items(running)[2]["price"] == Decimal("0.01")
    assert all(v == 0 for v in materializer.lag().values())

    execute(source, "insert into items values (500, 'gone', 1)", "truncate items",
            "insert into items values (7, 'after', 2), (8, 'after', 3)")
    wait_for(lambda: len(rows(source, "select 1 from items")) == 2
             and _has_messages(stack, f"{prefix}._bottler.truncate"), 30, "the truncate event")
    wait_for(lambda: topic_state(stack, f"{prefix}.items")[(("id", 8),)]["name"] == "after",
             30, "the rows inserted after the truncate")
    rebuild(running, group=materializer.group_id)
    fresh = MemorySink()
    rebuild(fresh)
    assert sink_items(fresh) == source_items(source) == sink_items(running)
    assert set(source_items(source)) == {7, 8}


def _has_messages(stack, topic) -> bool:
    try:
        return bool(read_topic(stack.kafka, topic))
    except KeyError:
        return False


def test_commit_markers_of_transactional_writers_do_not_hold_caught_up_back(stack):
    """A transaction's commit marker takes an offset no consumer is given (a translator writes
    its events that way): the loop still reaches the end and says caught up."""
    topic = Topic(stack)
    producer = Producer({"bootstrap.servers": stack.kafka, "transactional.id": topic.prefix})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic.name, key=topic.key({"id": i}),
                         value=topic.value({"id": i, "v": "t"}))
    producer.commit_transaction(30)
    sink = MemorySink()
    materializer = topic.materializer(sink)
    materializer.run_until_caught_up(timeout=30)
    assert ids(sink) == {0: "t", 1: "t", 2: "t"}
    assert materializer.lag() == {(topic.name, 0): 0, (topic.truncates, 0): 0}


def test_a_kafka_transaction_still_open_is_not_there_yet(stack):
    """The log's end a loop reads is the last stable offset: a Kafka transaction still open (a
    streamed transaction the capture publishes, a translator's batch) is not read in part, nor
    waited for, nor passed over; once committed it is read whole."""
    topic = Topic(stack)
    producer = Producer({"bootstrap.servers": stack.kafka, "transactional.id": topic.prefix})
    producer.init_transactions(30)
    for i, v in enumerate("ab"):  # the first committed, the second left open
        producer.begin_transaction()
        producer.produce(topic.name, key=topic.key({"id": i}), value=topic.value({"id": i, "v": v}))
        if i == 0:
            producer.commit_transaction(30)
    producer.flush(30)  # written, not committed
    sink = MemorySink()
    materializer = topic.materializer(sink)
    materializer.run_until_caught_up(timeout=30)
    assert ids(sink) == {0: "a"}
    producer.commit_transaction(30)
    topic.materializer(sink).run_until_caught_up(timeout=30)  # resumes where the sink stands
    assert ids(sink) == {0: "a", 1: "b"}
