"""Capture while the source changes shape: schema changes, truncates, transactions, heartbeats,
resuming a slot, skipping the snapshot, the JSON format."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from tests.support.databases import execute, rows
from tests.support.topics import Decoder, read_topic, topic_state
from tests.support.waiting import wait_for, wait_streaming

pytestmark = pytest.mark.pg_matrix  # on PostgreSQL 15 and 18 (tests/conftest.py)


def messages_of(stack, topic: str, n: int):
    def enough():
        try:
            messages = read_topic(stack.kafka, topic)
        except KeyError:
            return None
        return messages if len(messages) >= n else None

    return wait_for(enough, 60, f"{n} messages in {topic}")


def test_schema_changes_make_new_versions(stack, source, prefix, start):
    execute(source, "create table p (id int primary key, a int)", "insert into p values (1, 1)")
    start()
    topic = f"{prefix}.p"
    topic_state(stack, topic, 1)
    execute(
        source,
        "alter table p add column b text default 'x'",
        "insert into p values (2, 2, 'two')",
        "alter table p drop column a",
        "insert into p values (3, 'three')",
        "alter table p rename column b to c",
        "insert into p values (4, 'four')",
        "alter table p alter column c drop default",
        "alter table p alter column c type int using length(c)",  # not BACKWARD-compatible
        "insert into p values (5, 5)",
    )
    decoder = Decoder(stack.registry_url)
    values = [decoder.value(m) for m in messages_of(stack, topic, 5)]
    assert values[:4] == [
        {"id": 1, "a": 1},
        {"id": 2, "a": 2, "b": "two"},
        {"id": 3, "b": "three"},
        {"id": 4, "c": "four"},
    ]
    # The rename and the type change re-publish the table (capture/stream/schema_changes.py): every
    # row's latest message holds its present values, the rows the rewrite changed included.
    def rewritten():
        state = decoder.table_state(read_topic(stack.kafka, topic))
        return {k[0][1]: v for k, v in state.items()} == {
            1: {"id": 1, "c": 1}, 2: {"id": 2, "c": 3}, 3: {"id": 3, "c": 5},
            4: {"id": 4, "c": 4}, 5: {"id": 5, "c": 5}}

    wait_for(rewritten, 60, "the table re-published after its rename and type change")
    registry = SchemaRegistryClient({"url": stack.registry_url})
    assert registry.get_versions(f"{topic}-value") == [1, 2, 3, 4, 5]
    renamed = json.loads(registry.get_version(f"{topic}-value", 4).schema.schema_str)
    assert renamed["fields"][1]["pg.renamed"] == "b"
    assert registry.get_versions(f"{topic}-key") == [1]
    # the incompatible change was let through for this subject only, then the level restored
    assert registry.get_compatibility() == "BACKWARD"


def test_truncate_goes_to_the_control_topic_with_the_table_topics_end(
    stack, source, prefix, start
):
    execute(source, "create table t (id int primary key)",
            "insert into t select generate_series(1, 5)")
    start()
    topic_state(stack, f"{prefix}.t", 5)
    execute(source, "truncate t", "insert into t values (42)")
    decoder = Decoder(stack.registry_url)
    truncates = messages_of(stack, f"{prefix}._bottler.truncate", 1)
    event = decoder.value(truncates[0])
    assert (event["topic"], event["schema"], event["table"]) == (f"{prefix}.t", "public", "t")
    assert event["offsets"] == {"0": 5}  # everything before offset 5 is void
    after = messages_of(stack, f"{prefix}.t", 6)
    assert decoder.value(after[5]) == {"id": 42}


def test_transaction_topic_marks_boundaries(stack, source, prefix, start):
    execute(source, "create table t (id int primary key)")
    start(transaction_topic=True)
    wait_streaming(source, prefix)
    execute(source, "begin; insert into t values (1); insert into t values (2); commit")
    decoder = Decoder(stack.registry_url)
    events = [decoder.value(m) for m in messages_of(stack, f"{prefix}._bottler.transactions", 2)]
    assert [e["event"] for e in events[-2:]] == ["BEGIN", "COMMIT"]
    assert events[-1]["xid"] == events[-2]["xid"]


def test_idle_database_heartbeats_and_slot_advances(stack, source, prefix, start):
    execute(source, "create table t (id int primary key)")
    start(heartbeat_interval=0.5)
    wait_streaming(source, prefix)
    messages_of(stack, f"{prefix}._bottler.heartbeat", 2)
    other = source.rsplit("/", 1)[0] + "/postgres"
    execute(other, "create table if not exists wal_noise (x int)",
            "insert into wal_noise select generate_series(1, 10000)")
    target = rows(other, "select pg_current_wal_lsn()::text")[0][0]

    def caught_up():
        [(behind,)] = rows(other, f"select pg_wal_lsn_diff('{target}', confirmed_flush_lsn) "
                                  f"from pg_replication_slots where slot_name = '{prefix}'")
        return behind <= 0

    wait_for(caught_up, 30, "the idle slot to advance past other databases' WAL")


def test_restart_resumes_the_slot_without_a_new_snapshot(stack, source, prefix, start):
    execute(source, "create table t (id int primary key, v int)",
            "insert into t select g, 0 from generate_series(1, 10) g")
    first = start()
    topic_state(stack, f"{prefix}.t", 10)
    first.stop()
    execute(source, "update t set v = 1 where id = 1", "insert into t values (11, 0)")
    start()
    state = topic_state(stack, f"{prefix}.t", 11)
    assert state[(("id", 1),)] == {"id": 1, "v": 1}
    assert len(read_topic(stack.kafka, f"{prefix}.t")) == 12  # 10 + update + insert: no re-copy


def test_skip_snapshot_streams_only_new_changes(stack, source, prefix, start):
    execute(source, "create table t (id int primary key)", "insert into t values (1)")
    start(skip_snapshot=True)
    wait_streaming(source, prefix)
    execute(source, "insert into t values (2)")
    assert list(topic_state(stack, f"{prefix}.t", 1)) == [(("id", 2),)]


def test_json_output(stack, source, prefix, start):
    execute(source, "create table t (id int primary key, price numeric(6,2), at date)",
            "insert into t values (1, 9.99, '2024-02-29')")
    start(output_format="json")
    [msg] = messages_of(stack, f"{prefix}.t", 1)
    assert json.loads(msg.key()) == {"id": 1}
    assert json.loads(msg.value()) == {"id": 1, "price": "9.99", "at": 19782}
