"""The dead-letter topic's contract, shared by the consumer loop, the translators and the
warehouse job: a set-aside message keeps its key and value, and says why in its headers."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from common.kafka import Connection, await_topics, client_config
from materializers.core.clients import producer_config

CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1"}  # kept until someone replays it


def headers(topic: str, partition: int, offset: int, reason: str, error: str,
            materializer: str) -> list[tuple[str, bytes]]:
    """Where the message came from, why it was set aside, and by whom."""
    return [
        ("bottler.reason", reason.encode()),
        ("bottler.error", error.encode()),
        ("bottler.topic", topic.encode()),
        ("bottler.partition", str(partition).encode()),
        ("bottler.offset", str(offset).encode()),
        ("bottler.materializer", materializer.encode()),
    ]


def ensure_topic(bootstrap: Connection, topic: str) -> None:
    """Create the dead-letter topic unless it exists (one created meanwhile is fine)."""
    admin = AdminClient(client_config(bootstrap))
    if topic in admin.list_topics(timeout=10).topics:
        return
    new = NewTopic(topic, num_partitions=1, config=CONFIG)
    for future in admin.create_topics([new]).values():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    await_topics(admin, [topic])


def producer(bootstrap: Connection, topic: str) -> Producer:
    """An idempotent producer for the dead-letter ``topic``, created first if missing."""
    ensure_topic(bootstrap, topic)
    return Producer(producer_config(bootstrap))
