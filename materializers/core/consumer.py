"""The skeleton of every loop that reads table topics through a Kafka consumer: the replica and
the search view (loop.py's :class:`~materializers.core.loop.Materializer`) and the translators
(materializers/translators/runner.py). Each plugs in its own write and commit; what they share is
here, once:

- **assignment**: partitions assigned by hand (the loop says where each starts), or, with
  ``join_group``, by the group's eager rebalances. A rebalance runs inside ``consume``, between
  two batches; a consume during which the assignment changed is void (:meth:`_consume`) and the
  partitions still held are read again from our positions (:meth:`_refetch`);
- **positions**: ``_position``, where the loop stands in each held partition (``_assigned``),
  moved back by a truncate's barrier (positions.follow) or to the start after a lost log end
  (:meth:`_replay_lost`);
- **watermarks** (:meth:`_refresh_watermarks`): read now and then, at once after a short batch
  (the idle loop learns it is caught up), a broker restart being a pause; a deleted topic's
  partitions dropped; a lost log end replayed;
- **errors**: a consumer's error events and the broker's refusals (ACLs), named.

The poison policy is poison.py's :class:`~materializers.core.poison.DeadLetters`, which every
loop holds. The write and commit are the loops' own: the consumer loop flushes its sink before
the offsets are committed (or stored with the data); a translator commits the offsets inside its
Kafka transaction. The warehouse job is not a consumer loop: Spark's streaming query drives its
batches and the offsets are recorded in Delta (materializers/warehouse/job.py says what it shares).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from common.errors import BottlerError
from common.kafka import Connection, denied, is_denied
from materializers.core import positions, watermarks
from materializers.core.changes import TopicPartition
from materializers.core.lag import LagTracker

log = logging.getLogger(__name__)


class ConsumerLoop:
    """What a loop named ``name`` shares (the module docstring). A subclass gives ``_open``
    (making ``_consumer``; False: stopped before it could start), ``step`` (one batch) and
    ``_close``, and takes the hooks below it needs."""

    batch_size: int

    def __init__(self, name: str, *, bootstrap: Connection, group_id: str, join_group: bool,
                 watermark_interval: float, truncate_topic: str | None):
        self.name = name
        self.bootstrap = bootstrap
        self.group_id = group_id
        # Share the partitions with the other instances in ``group_id`` (a consumer-group
        # subscription) instead of assigning them all to this process.
        self.join_group = join_group
        self.truncate_topic = truncate_topic  # None: a loop that follows no truncate
        self.tracker = LagTracker(name)
        self._consumer: Consumer | None = None
        self._marks: watermarks.Reader | None = None
        self._generation = 0  # assignments so far (a rebalance during a consume voids it)
        self._assigned: set[TopicPartition] = set()
        self._position: dict[TopicPartition, int] = {}
        self._watermarks = watermarks.Schedule(watermark_interval)

    # -- public API ---------------------------------------------------------------------

    @property
    def caught_up(self) -> threading.Event:
        """Set once every assigned partition reached its high watermark (see LagTracker)."""
        return self.tracker.caught_up

    def lag(self) -> dict[TopicPartition, int | None]:
        """``(topic, partition) -> messages behind the high watermark`` (None: not yet known),
        for the assigned partitions; after a run, as last seen by it."""
        return self.tracker.lag()

    def run(self, stop_event: threading.Event | None = None) -> None:
        """Process batches until ``stop_event`` is set; the clients are closed at the end."""
        stop = stop_event or threading.Event()
        try:
            if not self._open(stop):
                return
            while not stop.is_set():
                self.step()
            self._finish()
        finally:
            self._close()

    def run_until_caught_up(self, timeout: float | None = None) -> None:
        """Process until :attr:`caught_up` is set, then close and return. TimeoutError after
        ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            self._open(threading.Event(), deadline)
            while not self.caught_up.is_set():
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"not caught up after {timeout}s: lag {self.lag()}")
                self.step()
            self._finish()
        finally:
            self._close()

    # -- what a loop gives ----------------------------------------------------------------

    def _open(self, stop: threading.Event, deadline: float | None = None) -> bool:
        raise NotImplementedError

    def step(self) -> None:
        raise NotImplementedError

    def _close(self) -> None:
        raise NotImplementedError

    def _finish(self) -> None:
        """After the last step of a run that was not stopped by an error."""

    def _assigned_by_group(self, consumer: Consumer,
                           partitions: list[KafkaTopicPartition]) -> None:
        """A rebalance gave this instance ``partitions`` (all it holds: eager)."""
        raise NotImplementedError

    def _giving_up(self, keys: list[TopicPartition]) -> None:
        """Before held partitions go to another instance (or were lost)."""

    def _watermarks_due(self) -> bool:
        """Whether the watermarks may be read now (the consumer loop settles its batch first)."""
        return True

    def _watermarks_unknown(self) -> None:
        """The broker could not say (restarting): the lag waits for it."""

    def _denied_otherwise(self, error: KafkaError) -> BottlerError:
        """A refusal that names neither a topic read nor the group."""
        return denied(self.bootstrap, "READ", "the topics and the consumer group "
                      f"{self.group_id}", error)

    # -- assignment -----------------------------------------------------------------------

    def _subscribe_to(self, topics: list[str]) -> None:
        """Join the group with the subscription ``topics`` (again when they change)."""
        self._consumer.subscribe(topics, on_assign=self._on_group_assign,
                                 on_revoke=self._on_group_revoke, on_lost=self._on_group_lost)

    def _on_group_assign(self, consumer: Consumer,
                         partitions: list[KafkaTopicPartition]) -> None:
        self._generation += 1
        self._assigned_by_group(consumer, partitions)

    def _on_group_revoke(self, consumer: Consumer,
                         partitions: list[KafkaTopicPartition]) -> None:
        """Partitions go to another instance; a batch read but not applied yet is voided by
        the new generation (:meth:`_consume`)."""
        self._generation += 1
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self._giving_up(keys)
        self.tracker.revoke(keys)
        for key in keys:
            self._assigned.discard(key)
            self._position.pop(key, None)

    def _on_group_lost(self, consumer: Consumer,
                       partitions: list[KafkaTopicPartition]) -> None:
        """Partitions taken away without a revoke (out of the group for too long)."""
        self._on_group_revoke(consumer, partitions)

    def _consume(self, timeout: float) -> tuple[list[Message], int]:
        """Up to ``batch_size`` messages (error events included) and how many came: none kept
        when the assignment changed meanwhile (they may come from before it)."""
        generation = self._generation
        messages = self._consumer.consume(self.batch_size, timeout)
        consumed = len(messages)
        if generation != self._generation:  # a rebalance within the consume: void
            self._refetch(messages)
            messages = []
        return messages, consumed

    def _refetch(self, messages: list[Message]) -> None:
        """Messages returned by a consume during which the assignment changed may come from
        before it: none is used; the partitions held now that they came from are read again
        from our positions (the others start there anyway)."""
        for tp in {(m.topic(), m.partition()) for m in messages if m.error() is None}:
            if tp in self._position and tp in self._assigned:
                # not fetching yet (KafkaException): it starts at the assigned offset, ours
                with contextlib.suppress(KafkaException):
                    self._consumer.seek(KafkaTopicPartition(*tp, self._position[tp]))

    # -- positions and watermarks ---------------------------------------------------------

    def _replay_lost(self, lost: list[TopicPartition]) -> list[TopicPartition]:
        """Seek to 0 every partition :func:`positions.replayed` says; returns them."""
        replay = positions.replayed(self.name, lost, self._assigned, self.truncate_topic)
        for tp in replay:
            self._consumer.seek(KafkaTopicPartition(*tp, 0))
        return replay

    def _refresh_watermarks(self, force: bool) -> None:
        """Read the watermarks when due (``force``: a short batch): the lag, a deleted topic's
        partitions dropped, a lost log end replayed (between two batches: the next one starts
        from there and writes those positions)."""
        if not self._watermarks.due(force, self.caught_up.is_set()):
            return
        if not self._watermarks_due():
            return
        gone: set[str] = set()
        marks = watermarks.read(self._marks, self.tracker.partitions, self.name, gone)
        # in a group, the group's own rebalance takes a deleted topic's partitions away
        for tp in watermarks.drop_vanished(self._consumer, gone, self._assigned, self.name,
                                           unassign=not self.join_group):
            self._assigned.discard(tp)  # so discovery takes it again if it comes back
            self._position.pop(tp, None)
            self.tracker.revoke([tp])
        if marks is None:  # the broker restarting: the lag waits for it
            self._watermarks_unknown()
            return
        lost = positions.lost_ends(self._position, {tp: h for tp, (_, h) in marks.items()})
        for tp in self._replay_lost(lost):
            self._position[tp] = 0
            self.tracker.advance(tp, 0)
        for tp, (low, high) in marks.items():
            self.tracker.observe(tp, low, high)

    # -- errors ---------------------------------------------------------------------------

    def _kafka_error(self, error: KafkaError, topic: str | None = None) -> None:
        """A consumer's error event: fatal or a refusal raises, the rest is logged."""
        if error.fatal():
            raise KafkaException(error)
        if is_denied(error):
            raise self._denied(error, topic)
        if error.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
            log.debug("%s: %s", self.name, error.str())
        else:
            log.warning("%s: %s", self.name, error.str())

    def _denied(self, error: KafkaError, topic: str | None) -> BottlerError:
        """A refusal under the broker's ACLs, named by what it refused."""
        if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and topic:
            return denied(self.bootstrap, "READ", f"topic {topic}", error)
        if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            return denied(self.bootstrap, "READ", f"consumer group {self.group_id}", error)
        return self._denied_otherwise(error)
