"""Capture end to end: snapshot plus stream into Kafka, read back with confluent-kafka's own
AvroDeserializer and compared with what PostgreSQL returns."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from common.errors import BottlerError
from schemas.avro_schema import without_logical_types
from schemas.serde import decode, split
from tests.support.databases import execute, rows
from tests.support.topics import Decoder, read_topic, topic_state
from tests.support.waiting import wait_for, wait_streaming

pytestmark = pytest.mark.pg_matrix  # on PostgreSQL 15 and 18 (tests/conftest.py)

SHOP = """
create table items (
    id int primary key, name text not null, price numeric(10,2),
    at timestamptz, doc jsonb, tags text[]
);
insert into items
select g, 'item ' || g, g * 1.5, timestamptz '2024-01-01 00:00:00+00' + g * interval '1 hour',
       jsonb_build_object('n', g), array['a', 'b' || g]
from generate_series(1, 100) g;
"""


def items_as_in_postgres(dsn: str) -> dict:
    return {
        (("id", r[0]),): {"id": r[0], "name": r[1], "price": r[2], "at": r[3],
                          "doc": r[4], "tags": r[5]}
        for r in rows(dsn, "select id, name, price, at, doc, tags from items")
    }


def normalized(state: dict) -> dict:
    return {k: {**v, "doc": json.loads(v["doc"]) if v["doc"] else None} for k, v in state.items()}


def test_snapshot_then_stream_equals_the_source(stack, source, prefix, start):
    execute(source, SHOP)
    capture = start()
    topic = f"{prefix}.items"
    assert normalized(topic_state(stack, topic, 100)) == items_as_in_postgres(source)

    execute(
        source,
        "insert into items select g, 'new ' || g, g, now(), null, null "
        "from generate_series(101, 110) g",
        "update items set name = 'renamed', price = 0.01 where id <= 5",
        "update items set doc = '{\"deep\": {\"x\": [1, 2]}}' where id = 6",
        "delete from items where id between 7 and 9",
        "update items set id = 1000 where id = 10",  # a key change: old key must disappear
        "begin; insert into items values (5000, 'never'); rollback",
    )
    expected = items_as_in_postgres(source)
    assert len(expected) == 110 - 3
    assert normalized(topic_state(stack, topic, len(expected))) == expected
    capture.stop()


def test_values_keep_their_types(stack, source, prefix, start):
    execute(source, SHOP)
    start()
    state = topic_state(stack, f"{prefix}.items", 100)
    first = state[(("id", 1),)]
    assert first["price"] == Decimal("1.50")
    assert first["at"].isoformat() == "2024-01-01T01:00:00+00:00"
    assert first["tags"] == ["a", "b1"]
    versions = SchemaRegistryClient({"url": stack.registry_url}).get_versions(
        f"{prefix}.items-value")
    assert versions == [1]


def test_tables_created_later_and_tables_without_columns(stack, source, prefix, start):
    execute(source, "create table first (id int primary key)", "insert into first values (1)")
    start()
    topic_state(stack, f"{prefix}.first", 1)
    execute(
        source,
        "create schema sales",
        "create table sales.later (id bigint primary key, note text)",
        "insert into sales.later values (1, 'a'), (2, 'b')",
    )
    later = topic_state(stack, f"{prefix}.sales.later", 2)
    assert later[(("id", 1),)] == {"id": 1, "note": "a"}


def test_aborted_transactions_never_appear(stack, source, prefix, start):
    execute(source, "create table t (id int primary key)")
    start()
    execute(source, "begin; insert into t values (1); rollback", "insert into t values (2)")
    state = topic_state(stack, f"{prefix}.t", 1)
    assert list(state) == [(("id", 2),)]
    assert len(read_topic(stack.kafka, f"{prefix}.t")) == 1


def test_unchanged_toast_with_replica_identity_full_publishes_the_whole_row(
    stack, source, prefix, start
):
    big = "x" * 20_000
    execute(
        source,
        "create table docs (id int primary key, small int, body text)",
        "alter table docs alter column body set storage external",
        "alter table docs replica identity full",
        f"insert into docs values (1, 0, '{big}')",
    )
    start()
    topic_state(stack, f"{prefix}.docs", 1)
    execute(source, "update docs set small = 1 where id = 1")
    decoder = Decoder(stack.registry_url)

    def updated():
        messages = read_topic(stack.kafka, f"{prefix}.docs")
        return messages if len(messages) == 2 else None

    last = decoder.value(wait_for(updated, 30, "the update")[-1])
    assert last == {"id": 1, "small": 1, "body": big}


def test_replica_identity_full_is_set_on_request(stack, source, prefix, start):
    execute(source, "create table notes (id int primary key, body text)")
    capture = start(replica_identity_full=True)
    wait_for(lambda: rows(source, "select relreplident from pg_class where relname = 'notes'")
             == [("f",)], 30, "replica identity full")
    capture.stop()


def test_unchanged_toast_without_full_identity_never_publishes_a_placeholder(
    stack, source, prefix, start
):
    big = "y" * 20_000
    execute(
        source,
        "create table docs (id int primary key, small int, body text)",
        "alter table docs alter column body set storage external",
        f"insert into docs values (1, 0, '{big}')",
    )
    capture = start()  # --on-error dead-letter: the update goes there, without the value
    topic_state(stack, f"{prefix}.docs", 1)
    execute(source, "update docs set small = 1 where id = 1")
    [letter] = wait_for(lambda: read_topic_or_none(stack, f"{prefix}._bottler.capture-dead-letter"),
                        30, "the dead letter")
    letter = json.loads(letter.value())
    assert letter["op"] == "update" and letter["unchanged"] == ["body"]
    assert letter["columns"] == {"id": "1", "small": "1", "body": None}
    assert "REPLICA IDENTITY FULL" in letter["reason"]
    capture.stop()

    capture = start(on_error="exit")
    execute(source, "update docs set small = 2 where id = 1")
    error = capture.wait_failed()
    assert isinstance(error, BottlerError)
    assert "REPLICA IDENTITY FULL" in str(error)
    messages = read_topic(stack.kafka, f"{prefix}.docs")
    assert all(Decoder(stack.registry_url).value(m)["body"] == big for m in messages)


def test_the_slot_is_a_failover_slot_where_the_server_has_them(stack, source, prefix, start):
    """17+: auto makes a failover slot; older: auto makes a plain one, and on is refused in one
    line before anything is created."""
    execute(source, "create table t (id int primary key)")
    new_enough = int(rows(source, "show server_version_num")[0][0]) >= 170000
    if not new_enough:
        error = start(failover="on").wait_failed()
        assert str(error).startswith("failover slots need PostgreSQL 17 or newer")
        assert not rows(source, f"select 1 from pg_replication_slots where slot_name = '{prefix}'")
    start()
    wait_streaming(source, prefix)
    if new_enough:
        assert rows(source, "select failover from pg_replication_slots "
                    f"where slot_name = '{prefix}'") == [(True,)]


def test_unkeyed_tables_are_refused_unless_allowed(stack, source, prefix, start):
    execute(source, "create table log (at int, line text)", "insert into log values (1, 'a')")
    error = start().wait_failed()
    assert isinstance(error, BottlerError)
    assert "public.log" in str(error) and "--allow-unkeyed" in str(error)


def test_allowed_unkeyed_tables_publish_rows_without_keys_and_no_deletes(
    stack, source, prefix, start
):
    execute(
        source,
        "create table log (at int, line text)",
        "alter table log replica identity full",  # PostgreSQL refuses deletes otherwise
        "insert into log values (1, 'a')",
    )
    start(allow_unkeyed=True)
    decoder = Decoder(stack.registry_url)

    def published(n):
        def check():
            try:
                messages = read_topic(stack.kafka, f"{prefix}.log")
            except KeyError:
                return None
            return messages if len(messages) >= n else None
        return check

    wait_for(published(1), 30, "the snapshot")
    execute(source, "insert into log values (2, 'b')", "delete from log where at = 1",
            "insert into log values (3, 'c')")
    messages = wait_for(published(3), 30, "the unkeyed rows")
    assert [m.key() for m in messages] == [None, None, None]
    assert [decoder.value(m) for m in messages] == [
        {"at": 1, "line": "a"}, {"at": 2, "line": "b"}, {"at": 3, "line": "c"}
    ]  # the delete is not published: there is no key to delete


def test_big_tables_are_copied_in_parallel_ctid_ranges(stack, source, prefix, start):
    execute(source, "create table big (id int primary key, pad text)",
            "insert into big select g, repeat('p', 50) from generate_series(1, 20000) g")
    start(snapshot_workers=2, snapshot_chunk_pages=8)  # many small ranges, two workers
    state = topic_state(stack, f"{prefix}.big", 20000)
    assert {dict(k)["id"] for k in state} == set(range(1, 20001))
    assert len(read_topic(stack.kafka, f"{prefix}.big")) == 20000  # ranges do not overlap


def test_oversized_rows_follow_the_error_policy(stack, source, prefix, start):
    execute(source, "create table t (id int primary key, body text)")
    limits = {"message.max.bytes": "2000"}
    capture = start(kafka_config=limits, on_error="log")
    wait_streaming(source, prefix)
    execute(source, f"insert into t values (1, '{'z' * 5000}')", "insert into t values (2, 'ok')")
    state = topic_state(stack, f"{prefix}.t", 1)
    assert list(state) == [(("id", 2),)]  # the oversized row was skipped, logged
    capture.stop()

    execute(source, f"insert into t values (3, '{'z' * 5000}')")
    error = start(kafka_config=limits, on_error="exit").wait_failed()
    assert "message.max.bytes" in str(error)


def test_a_table_without_columns_and_rich_types_through_the_stream(
    stack, source, prefix, start
):
    execute(
        source,
        "create table nothing ()",
        "create type mood as enum ('ok', 'meh')",
        "create table rich (id int primary key, m mood, grid int[][], span int4range,"
        " took interval, at timestamp, blob bytea, f float8)",
    )
    start(allow_unkeyed=True)
    wait_streaming(source, prefix)
    execute(
        source,
        "insert into nothing default values",
        "insert into rich values (1, 'meh', '{{1,NULL},{3,4}}', '[2,5)', '-1 day 02:00:00',"
        " '0044-03-15 12:00:00 BC', '\\x00ff', 'NaN')",
    )
    registry = SchemaRegistryClient({"url": stack.registry_url})

    def decoded(msg) -> dict:
        # confluent-kafka's deserializer cannot read an empty record (5 bytes) nor BC dates:
        # decode with the writer's schema, logical types aside.
        writer = registry.get_schema(split(msg.value())[0])
        return decode(msg.value(), without_logical_types(json.loads(writer.schema_str)))

    [empty] = wait_for(lambda: read_topic_or_none(stack, f"{prefix}.nothing"), 30, "nothing")
    assert decoded(empty) == {}
    [msg] = wait_for(lambda: read_topic_or_none(stack, f"{prefix}.rich"), 30, "rich")
    value = decoded(msg)
    assert value["m"] == "meh"
    assert value["grid"] == [[1, None], [3, 4]]
    assert value["span"] == {"empty": False, "lower": 2, "upper": 5,
                             "lower_inclusive": True, "upper_inclusive": False}
    assert value["took"] == {"months": 0, "days": -1, "microseconds": 2 * 3600 * 10**6}
    assert value["blob"] == b"\x00\xff"
    assert value["f"] != value["f"]  # NaN
    days = rows(source, "select extract(epoch from timestamp '0044-03-15 12:00:00 BC')")[0][0]
    assert value["at"] == int(days * 10**6)


def read_topic_or_none(stack, topic):
    try:
        return read_topic(stack.kafka, topic) or None
    except KeyError:
        return None
