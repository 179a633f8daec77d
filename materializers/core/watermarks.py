"""Reading the partitions' watermarks, once for every loop, so that a broker restart is a pause.

The loops read the (low, high) watermarks now and then: for the lag, for "caught up", and to
see a partition whose log lost its end (positions.py). While the broker restarts the read
fails; that is no reason to stop a view: the read is given up for this round, and the lag
stays as last known until the broker answers again. A topic that no longer exists (deleted, say
by `bottler retire`) is another matter: its partitions are dropped from the assignment with one
log line (``drop_vanished``), and discovery reads it again should it be created again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from confluent_kafka import Consumer, IsolationLevel, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from common.kafka import Connection, client_config, settled
from materializers.core.changes import TopicPartition

log = logging.getLogger(__name__)

Watermarks = dict[TopicPartition, tuple[int, int]]
"""``(topic, partition) -> (low, high)``: the log's first offset and the offset after its end as
a read_committed reader sees it (the last stable offset: where the oldest Kafka transaction still
open begins, else the log's end). Every reader of bottler's topics reads committed data only
(the capture publishes a streamed transaction in one Kafka transaction, a translator each
batch): a transaction still open is not there yet, so nothing moves past it."""


class Reader:
    """The admin client watermarks are read through, made anew after a failed read: after a
    broker restart librdkafka's admin client may go on asking with stale metadata ("Leader
    epoch is older than broker epoch") until it is replaced."""

    def __init__(self, connection: Connection):
        self.connection = connection
        self._admin: AdminClient | None = None

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(client_config(self.connection))
        return self._admin

    def failed(self) -> None:
        self._admin = None


def read(reader: Reader, partitions: Iterable[TopicPartition], name: str,
         gone: set[str] | None = None) -> Watermarks | None:
    """The watermarks of ``partitions`` as the broker has them now (not a client's cache), in
    two ListOffsets requests for all of them; None if the broker cannot say (restarting,
    unreachable): try again later. Topics the broker no longer has are added to ``gone``
    (when given) and left out.

    Through an admin client, not the reading consumer: Kafka answers a connection's requests
    in order, so a ListOffsets sent on the consumer's connection waits behind its fetch, which
    the broker holds up to ``fetch.wait.max.ms`` at the end of the log (a caught-up replica
    took 0.56 s to show a change, reading its watermarks one partition at a time so)."""
    asked = [KafkaTopicPartition(t, p) for t, p in partitions if not (gone and t in gone)]
    if not asked:
        return {}
    admin = reader.admin
    try:
        requests = [admin.list_offsets({tp: spec for tp in asked}, request_timeout=10,
                                       isolation_level=IsolationLevel.READ_COMMITTED)
                    for spec in (OffsetSpec.earliest(), OffsetSpec.latest())]
    except KafkaException as exc:
        log.warning("%s: watermarks unknown for now: %s", name, exc.args[0].str())
        reader.failed()
        return None
    lows, highs = ({(tp.topic, tp.partition): answer for tp, answer in settled(r).items()}
                   for r in requests)  # settled: see there why nothing here raises
    marks: Watermarks = {}
    for tp in asked:
        key = (tp.topic, tp.partition)
        failure = next((a for a in (lows[key], highs[key]) if isinstance(a, KafkaException)),
                       None)
        if failure is None:
            marks[key] = (lows[key].offset, highs[key].offset)
        elif gone is not None and _vanished(admin, tp.topic, failure):
            gone.add(tp.topic)
        else:
            log.warning("%s: watermarks of %s[%d] unknown for now: %s", name, tp.topic,
                        tp.partition, failure.args[0].str())
            reader.failed()
            return None
    return marks


# When every partition asked is gone, librdkafka fails the whole request before asking for
# offsets: _NOENT, "Failed to query partition leaders: No leaders found" (seen when `bottler
# retire` deleted all the topics a replica read at once). The broker is asked either way.
_MISSING = (KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_TOPIC, KafkaError._NOENT)


def _vanished(admin: AdminClient, topic: str, exc: KafkaException) -> bool:
    """Whether ``topic`` is gone from the broker (not merely unanswered: the broker is asked)."""
    if exc.args[0].code() not in _MISSING:
        return False
    try:
        meta = admin.list_topics(timeout=10).topics.get(topic)
    except KafkaException:  # the broker away: a pause, not a deletion
        return False
    return meta is None or (meta.error is not None and meta.error.code() in _MISSING)


def drop_vanished(consumer: Consumer, topics: set[str], assigned: Iterable[TopicPartition],
                  name: str, unassign: bool = True) -> list[TopicPartition]:
    """Unassign the partitions of ``topics``, which no longer exist, logging once for each;
    the partitions dropped, for the caller to forget (its lag tracker, positions…)."""
    dropped = [tp for tp in assigned if tp[0] in topics]
    if dropped and unassign:
        consumer.incremental_unassign([KafkaTopicPartition(t, p) for t, p in dropped])
    for topic in sorted(topics):
        log.warning("%s: topic %s no longer exists (deleted): stopped reading it; it is read "
                    "again if it is created again", name, topic)
    return dropped


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
