"""What the broker holds: a topic's end offsets, watched until a count is reached."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

# what a topic just made answers until its partitions have their leader
NO_LEADER_YET = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                 KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION}


class TopicWatch:
    """Messages in a topic, or in several together (``more``)."""

    def __init__(self, bootstrap: str, topic: str, *more: str):
        self.topic = topic
        self.topics = (topic, *more)
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "log_level": 4,
                                   "group.id": f"bench-{uuid.uuid4().hex[:8]}"})
        # a topic's partitions, once it exists: not asked for again on every poll
        self._partitions: dict[str, list[TopicPartition]] = {}

    def end(self) -> int:
        """Messages in the topics (the sum of their partitions' high watermarks), 0 for one
        not made yet."""
        return sum(self._end(topic) for topic in self.topics)

    def reached(self, expected: int, timeout: float, check: Callable[[], object] = lambda: None,
                ) -> float:
        """The monotonic time the topics first held ``expected`` messages. Polled often only
        near the end: each poll costs the broker requests, and 50 polls a second took a fifth of
        a core from what was measured (docs/benchmarks.md). ``check`` runs between polls
        (raises to give up)."""
        start = time.monotonic()
        end, at = self.end(), time.monotonic()
        rate = 0.0  # messages a second between the last two polls
        while end < expected:
            if at - start > timeout:
                raise RuntimeError(f"{self.topic} holds {end:,} of {expected:,} messages after "
                                   f"{timeout:.0f} s")
            check()
            rest = (expected - end) / rate if rate > 0 else 0.5  # seconds, at the last rate
            time.sleep(min(0.25, max(0.02, rest / 5)))
            before, before_at = end, at
            end, at = self.end(), time.monotonic()
            rate = (end - before) / (at - before_at)
        return at

    def forget(self) -> None:
        """The topics were deleted (and may be made again, with other partitions)."""
        self._partitions.clear()

    def _end(self, topic: str) -> int:
        partitions = self._partitions.get(topic)
        if partitions is None:
            meta = self._consumer.list_topics(topic, timeout=10).topics[topic]
            if meta.error is not None:
                return 0
            partitions = [TopicPartition(topic, p) for p in meta.partitions]
        try:
            end = sum(self._consumer.get_watermark_offsets(tp, timeout=10)[1]
                      for tp in partitions)
        except KafkaException as exc:
            if exc.args[0].code() not in NO_LEADER_YET:
                raise
            return 0  # a topic just made, its partitions' leader not elected yet
        self._partitions[topic] = partitions
        return end

    def close(self) -> None:
        self._consumer.close()


def expect_messages(bootstrap: str, topic: str, count: int) -> None:
    """RuntimeError unless ``topic`` holds ``count`` messages."""
    watch = TopicWatch(bootstrap, topic)
    try:
        held = watch.end()
    finally:
        watch.close()
    if held != count:
        raise RuntimeError(f"{topic} holds {held:,} messages, not {count:,}")


def wait_until(check: Callable[[], bool], timeout: float, what: str, every: float = 0.02) -> float:
    """The monotonic time at which ``check()`` first held (polled every ``every`` seconds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(every)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def delete_topics(bootstrap: str, prefix: str) -> None:
    """Delete the topics named ``prefix``…: the embedded broker saves all it holds every few
    seconds, at a CPU cost that grows with what it holds, so measurements clean up after
    themselves to keep that cost out of the next one."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix)]
    for future in (admin.delete_topics(names, operation_timeout=30).values() if names else ()):
        future.result(timeout=60)


def warm_transactions(bootstrap: str) -> None:
    """A broker's first transaction ever makes its transaction log: about half a second, once
    in the broker's life, which the capture's start pays (it registers its Kafka transactions).
    Paid here, before a figure that times a capture's start: a broker in service paid it long
    ago."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "bench-warm"})
    producer.init_transactions(30)
