"""The settings of the capture's producers: the base every one of them starts from (the rows',
the snapshot workers', the dead letters'), and the rows' batch size under the topics' limit."""

from __future__ import annotations

BASE_CONFIG = {
    "enable.idempotence": True,  # no duplicates or reordering from the producer's own retries
    "acks": "all",
    "partitioner": "murmur2_random",  # Java's partitioner: every event of a key in one partition
    "linger.ms": 5,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 64 * 1024,  # what may wait unacknowledged: bounds memory
}


def producer_config(kafka_config: dict[str, str], topic_config: dict[str, str]) -> dict[str, str]:
    """The producer's settings: -C, with ``batch.size`` under the topics' ``max.message.bytes``
    (-T) unless -C sets it. The broker refuses a whole batch over a topic's limit: small rows
    batched with a large one would be refused with it."""
    try:
        limit = int(topic_config.get("max.message.bytes", 0))
    except ValueError:
        return kafka_config  # the broker reports it when the topics are created
    if limit <= 0 or "batch.size" in kafka_config:
        return kafka_config
    size = limit - limit // 255 - 1024  # room for compression's worst case and the framing
    return {**kafka_config, "batch.size": str(max(1, min(1_000_000, size)))}
