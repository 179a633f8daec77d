"""A reader with nothing new to read lets its partitions go until there is.

Kafka holds a fetch at the end of a partition for ``fetch.wait.max.ms``; noida-db, the embedded
stack's broker, answers it at once, and librdkafka asks again at once. Measured on the embedded
stack, one assigned consumer with nothing to read kept 0.45 core busy in its own process and
0.38 in the broker's, whatever the client's fetch settings: a handful of idle views took both
cores of a small machine (docs/operations.md). Pausing the partitions does not do: librdkafka
resumes fetching only a second after a pause, so a reader that pauses and resumes in short
cycles never fetches at all. So a caught-up reader unassigns its partitions, asks for their end
offsets every :data:`LOOK` seconds (one request for all of them: under 0.01 core), and assigns them
again at its own positions once one has moved, or after :data:`LONGEST` seconds so that its
other duties go on. A change waits at most :data:`LOOK` seconds longer.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from materializers.core.changes import TopicPartition

LOOK = 0.05  # seconds between looks at the end offsets while resting
LONGEST = 1.0  # seconds a rest lasts at most
_LATEST = -1  # ListOffsets' timestamp for "the end of the log"


def rest(consumer: Consumer, positions: Mapping[TopicPartition, int]) -> None:
    """Unassigns the partitions of ``positions`` (the next offset to read of each, all of the
    consumer's assignment) until one has something at or past its position, then assigns them
    again there."""
    held = [KafkaTopicPartition(topic, partition, offset)
            for (topic, partition), offset in positions.items()]
    if not held:
        return
    consumer.incremental_unassign(held)
    try:
        until = time.monotonic() + LONGEST
        while time.monotonic() < until:
            time.sleep(LOOK)
            if _moved(consumer, positions):
                break
    finally:
        consumer.incremental_assign(held)


def _moved(consumer: Consumer, positions: Mapping[TopicPartition, int]) -> bool:
    """Whether a partition's log ends past its position (or the broker cannot say: read on)."""
    ends = [KafkaTopicPartition(topic, partition, _LATEST) for topic, partition in positions]
    try:
        found = consumer.offsets_for_times(ends, timeout=5)
    except KafkaException:
        return True
    return any(tp.error is not None or tp.offset > positions[(tp.topic, tp.partition)]
               for tp in found)
