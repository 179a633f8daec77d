"""Compaction for real (Apache Kafka's log cleaner): a table topic with short segments loses
its superseded values and, after ``delete.retention.ms``, its tombstones; a replica rebuilt from
offset zero after that equals the source."""

from __future__ import annotations

import time

from tests.support.databases import execute, fresh_database
from tests.support.replica import converge, fetch, replica
from tests.support.topics import copied, read_topic
from tests.support.waiting import wait_for, wait_streaming

ROWS = 200
UPDATES = 5
DELETED = 50  # ids 1..50
# segments roll after 1 s (on the next append), the cleaner takes any dirty segment, and a
# tombstone is purged once it has been in a cleaned segment for a second
COMPACT_FAST = {"segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": "1000", "min.compaction.lag.ms": "0"}
TABLE = "select id, v from t order by id"


def test_a_compacted_topic_drops_superseded_values_and_tombstones_and_rebuilds_equal(
        stack, source, prefix, start):
    execute(source, "create table t (id int primary key, v int)",
            f"insert into t select g, 0 from generate_series(1, {ROWS}) g")
    start(topic_config=COMPACT_FAST)
    wait_streaming(source, prefix)
    for round_ in range(1, UPDATES + 1):
        execute(source, f"update t set v = {round_}")
    execute(source, f"delete from t where id <= {DELETED}")
    topic = f"{prefix}.t"
    written = ROWS * (UPDATES + 1) + DELETED  # snapshot, updates, tombstones
    # counted by the end offset: the cleaner may drop superseded values before they are read
    # (a busy CI run never saw all of them in the log)
    wait_for(lambda: copied(stack, topic) >= written, 300, "every change")

    def compacted() -> bool:
        # an append now and then rolls the active segment, so the cleaner gets to the rest
        execute(source, f"update t set v = v + 1 where id = {ROWS}")
        messages = read_topic(stack.kafka, topic)
        keys = [m.key() for m in messages]
        tombstones = sum(m.value() is None for m in messages)
        return len(keys) - len(set(keys)) <= 2 and tombstones == 0

    # the cleaner looks every second here (tests/support/stack.py TEST_BROKER, Kafka's default
    # 15 s); a tombstone goes on a later pass
    started = time.monotonic()
    wait_for(compacted, 240, "the topic compacted: one value per live key, no tombstone")
    left = read_topic(stack.kafka, topic)
    assert len(left) < written / 5, f"{len(left)} of {written} messages left"
    print(f"compacted in {time.monotonic() - started:.0f} s: {len(left)} of {written} left")

    with fresh_database(stack.pg_dsn) as rebuilt, \
            replica(stack, rebuilt, prefix) as (_, _, failure):
        converge(source, rebuilt, [TABLE], failure)
        assert len(fetch(rebuilt, TABLE)) == ROWS - DELETED
