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
    limit = _under_topics_limit(topic_config)
    if limit is None or "batch.size" in kafka_config:
        return kafka_config
    return {**kafka_config, "batch.size": str(max(1, min(1_000_000, limit)))}


def transactional_config(kafka_config: dict[str, str],
                         topic_config: dict[str, str]) -> dict[str, str]:
    """The producer's settings inside Kafka transactions: a message the broker refuses for its
    size fails the whole transaction, so the producer refuses it first, before sending it
    (then --on-error decides, as for any row too large): ``message.max.bytes`` under the
    topics' ``max.message.bytes`` (-T) too."""
    config = producer_config(kafka_config, topic_config)
    limit = _under_topics_limit(topic_config)
    if limit is None:
        return config
    given = int(config.get("message.max.bytes", 1_000_000))
    return {**config, "message.max.bytes": str(max(1000, min(given, limit)))}


def _under_topics_limit(topic_config: dict[str, str]) -> int | None:
    """The largest batch sure to fit under the topics' ``max.message.bytes`` (-T), if set."""
    try:
        limit = int(topic_config.get("max.message.bytes", 0))
    except ValueError:
        return None  # the broker reports it when the topics are created
    if limit <= 0:
        return None
    return limit - limit // 255 - 1024  # room for compression's worst case and the framing
