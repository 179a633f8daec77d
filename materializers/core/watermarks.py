"""Reading the partitions' watermarks, once for every loop, so that a broker restart is a pause.

The loops read the (low, high) watermarks now and then: for the lag, for "caught up", and to
see a partition whose log lost its end (positions.py). While the broker restarts the read
fails; that is no reason to stop a view: the read is given up for this round, and the lag
stays as last known until the broker answers again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from materializers.core.changes import TopicPartition

log = logging.getLogger(__name__)

Watermarks = dict[TopicPartition, tuple[int, int]]
"""``(topic, partition) -> (low, high)``: the log's first offset and the offset after its end."""


def read(consumer: Consumer, partitions: Iterable[TopicPartition],
         name: str) -> Watermarks | None:
    """The watermarks of ``partitions`` as the broker has them now (not the client's cache);
    None if the broker cannot say (restarting, unreachable): try again later."""
    marks: Watermarks = {}
    for topic, partition in partitions:
        try:
            marks[(topic, partition)] = consumer.get_watermark_offsets(
                KafkaTopicPartition(topic, partition), timeout=10, cached=False)
        except KafkaException as exc:
            log.warning("%s: watermarks of %s[%d] unknown for now: %s", name, topic,
                        partition, exc.args[0].str())
            return None
    return marks


class Schedule:
    """When a running loop reads the watermarks again: every ``interval`` seconds, and at once
    when asked (``force``: a short batch, maybe the end) while not caught up yet."""

    def __init__(self, interval: float):
        self.interval = interval
        self._next = 0.0

    def reset(self) -> None:
        self._next = 0.0

    def due(self, force: bool, caught_up: bool) -> bool:
        now = time.monotonic()
        if now < self._next and not (force and not caught_up):
            return False
        self._next = now + self.interval
        return True
