"""The consumer loop's write and commit (loop.py): a batch is written and flushed into the sink
in a thread of its own (while the next one is consumed and decoded), and only then are its
offsets committed; a failed write or flush leaves them uncommitted, and the batch is replayed.

A sink that stores its offsets with the data (the replica, the search view) restarts from them:
the consumer group's commit only informs (tools listing groups), made now and then and at
close, never holding up a batch. With instances sharing a group, another instance may move
those stored offsets (a truncate it applied set its barrier): the loop then resumes from them.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from common.kafka import is_denied
from materializers.core import metrics, poison
from materializers.core.changes import Change, TopicPartition
from materializers.core.consumer import ConsumerLoop
from materializers.core.poison import DeadLetters
from materializers.core.sink import Offsets, OffsetsMoved, Sink

log = logging.getLogger(__name__)

# Seconds between the consumer group's commits when the sink keeps its own offsets: those
# commits only inform, and every commit is a write to __consumer_offsets: one per batch during
# a rebuild would be thousands for nothing.
INFORMATIVE_COMMIT_INTERVAL = 30.0


class SinkWriting(ConsumerLoop):
    """A consumer loop that writes into a :class:`~materializers.core.sink.Sink`, setting
    aside what it refuses by the loop's poison policy (``dead_letters``)."""

    dead_letters: DeadLetters

    def __init__(self, sink: Sink, name: str, **skeleton: Any):
        super().__init__(name, **skeleton)
        self.sink = sink
        self._applying: tuple[Future, Offsets] | None = None  # the batch being applied
        self._written: dict[TopicPartition, int] = {}  # offsets stored by us, per held partition
        self._sink_keeps_offsets = False
        self._pending_commit: dict[TopicPartition, int] = {}  # not committed to the group yet
        self._next_informative_commit = 0.0

    def _apply(self, changes: list[Change], offsets: Offsets,
               sources: dict[int, Message]) -> None:
        """Write and flush one batch (the poison policy for what the sink refuses), then
        commit its offsets: in the background thread."""
        def content(change: Change) -> poison.Content:
            msg = sources[id(change)]
            return msg.key(), msg.value()

        applied = poison.apply(self.sink, changes, offsets, self.dead_letters, content)
        self._written.update({tp: o for tp, o in offsets.items() if tp in self._assigned})
        if self._sink_keeps_offsets:
            # The sink restarts from its own offsets: the group's commit is informative.
            self._pending_commit.update(offsets)
            if time.monotonic() >= self._next_informative_commit:
                self._commit_pending(asynchronous=True)
        else:
            self._commit(offsets, asynchronous=False)
        metrics.BATCHES.labels(self.name).inc()
        metrics.count_changes(self.name, applied)

    def _settle(self) -> None:
        """Wait for the batch being applied: raise its failure, or count its offsets as done."""
        if self._applying is None:
            return
        future, offsets = self._applying
        self._applying = None
        future.result()
        for tp, offset in offsets.items():
            self.tracker.advance(tp, offset)

    def _settled(self) -> bool:
        """:meth:`_settle`, False when another instance moved the stored offsets of our
        partitions (nothing of the batch was applied): positions are then read again."""
        try:
            self._settle()
            return True
        except OffsetsMoved as exc:
            log.info("%s: %s: resuming from the stored offsets", self.name, exc)
            self._resync()
            return False

    def _resync(self) -> None:
        """Resume every held partition from the offsets stored with the data."""
        keys = sorted(self._assigned)
        stored = self.sink.stored_offsets(keys) or {}
        for tp in keys:
            offset = stored.get(tp, 0)
            if self._position.get(tp) != offset:
                self._consumer.seek(KafkaTopicPartition(*tp, offset))
                self._position[tp] = offset
                self.tracker.assign({tp: offset})
            self._written[tp] = offset

    def _moved_elsewhere(self) -> None:
        """Another instance moved a partition we hold (a truncate it applied set its barrier):
        seen now, with nothing in flight, even when no message of it arrives."""
        if not (self.join_group and self._sink_keeps_offsets and self._assigned):
            return
        # a sink may offer a lighter read for this (the replica keeps its table cache)
        peek = getattr(self.sink, "peek_offsets", self.sink.stored_offsets)
        stored = peek(sorted(self._assigned)) or {}
        if any(stored.get(tp, 0) != self._written.get(tp, 0) for tp in self._assigned):
            log.info("%s: another instance moved the stored offsets of our partitions: "
                     "resuming from them", self.name)
            self._resync()

    def _watermarks_due(self) -> bool:
        if not self._settled():  # a lost log end is judged against what was applied
            return False
        self._moved_elsewhere()
        return True

    def _commit_pending(self, asynchronous: bool) -> None:
        pending, self._pending_commit = self._pending_commit, {}
        self._next_informative_commit = time.monotonic() + INFORMATIVE_COMMIT_INTERVAL
        self._commit(pending, asynchronous)

    def _commit(self, offsets: Offsets, asynchronous: bool) -> None:
        assigned = [KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()
                    if (t, p) in self._assigned]
        if not assigned:
            return
        try:
            self._consumer.commit(offsets=assigned, asynchronous=asynchronous)
        except KafkaException as exc:  # the data and (where kept) offsets are durable
            if is_denied(exc.args[0]):
                raise self._denied(exc.args[0], None) from None
            log.warning("%s: committing consumer offsets failed: %s", self.name, exc)
