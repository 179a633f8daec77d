"""-T topic settings reach the capture's existing topics (issue 13, item 6): following the
oversized-row hint (`-T max.message.bytes=N`) lets the row through at the next start, against
the real broker, which enforces the topic's limit."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource

from tests.support.databases import execute
from tests.support.topics import read_topic
from tests.support.waiting import wait_for, wait_streaming

BIG = "8000000"


def topic_setting(admin: AdminClient, topic: str, name: str) -> str:
    described = admin.describe_configs([ConfigResource("topic", topic)])
    return next(iter(described.values())).result(timeout=10)[name].value


def test_following_the_oversized_row_hint_lets_the_row_through(stack, source, prefix, start):
    execute(source, "create table docs (id int primary key, body text)",
            "insert into docs values (1, 'small')")
    first = start()
    wait_streaming(source, prefix)
    first.stop()
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    topic = f"{prefix}.docs"
    assert topic_setting(admin, topic, "max.message.bytes") != BIG

    # about 2 MB of incompressible text: more than the topic's default limit of 1 MB
    execute(source, "insert into docs select 2, string_agg(md5(g::text), '')"
                    " from generate_series(1, 60000) g")
    producer_allows = {"message.max.bytes": BIG}
    failed = start(kafka_config=producer_allows, on_error="exit").wait_failed()
    assert "-T max.message.bytes=N" in str(failed), failed

    start(kafka_config=producer_allows, topic_config={"max.message.bytes": BIG})
    # (the first capture may have been stopped mid-snapshot, whose resumption publishes row 1
    # again: the big row is the one over the old limit)
    wait_for(lambda: any(len(m.value() or b"") > 1_048_588
                         for m in read_topic(stack.kafka, topic)), 60, "the big row published")
    assert topic_setting(admin, topic, "max.message.bytes") == BIG
    # the capture's control topics follow -T too (it owns them as well)
    assert topic_setting(admin, f"{prefix}._bottler.heartbeat", "max.message.bytes") == BIG
