"""The consumer loop of the replica and the search view: topics → decoded changes → sink → commit.

Per batch: consume up to ``batch_size`` messages (or what arrives within ``batch_timeout``; once
caught up and while batches are not full, within ``live_batch_timeout``, so that a change waits
for its batch at most that long),
decode them, ``sink.write(changes, offsets)``, ``sink.flush()``, and only then commit the
consumer offsets (writing.py). A failed write or flush raises out of :meth:`Materializer.run`
with nothing committed: the next run replays the batch (sinks are idempotent). While behind
(full batches), a batch is written and flushed in a thread of its own while the next one is
consumed and decoded: the target's time (a database executing the COPY, a cluster indexing)
overlaps ours. The sink is still called for one thing at a time, in order; lag counts a batch
only once flushed.

Truncates are barriers and a partition that lost its log end is replayed (positions.py): the
loop moves its consumer as those say; the moved positions are part of the batch's offsets, so a
restart resumes from them. Assignment, watermarks, the refetch after a rebalance and errors are
the skeleton's (consumer.py); poison messages follow the poison policy (poison.py).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from common import gctune
from common.kafka import Connection
from common.registry_client import Registry
from materializers.core import positions, watermarks
from materializers.core.changes import Change, TopicPartition
from materializers.core.clients import consumer_config
from materializers.core.decode import ChangeReader, DecodeError, Decoder
from materializers.core.lag import ProgressBar
from materializers.core.ownership import OwnedTopics, discover_or_none
from materializers.core.poison import DeadLetters, PoisonMessage, PoisonPolicy
from materializers.core.sink import Offsets, OffsetsMoved, Sink
from materializers.core.writing import SinkWriting
from schemas.topics import DEAD_LETTER, TRUNCATE, table_topics, with_prefix

log = logging.getLogger(__name__)

__all__ = ["Materializer", "PoisonMessage", "PoisonPolicy"]

DISCOVERY_INTERVAL = 5.0  # seconds between looks for new table topics


class Materializer(SinkWriting):
    """Feeds a :class:`~materializers.core.sink.Sink` from table topics.

    Reads ``topics`` (a list of table topics) or, without it, the table topics the capture of
    ``prefix`` (its ``--topic-prefix``) records as its own (ownership.py), or those matching
    ``pattern`` (a regex, to give them yourself); new ones are picked up every few seconds;
    plus the prefix's ``_bottler.truncate`` control topic. Other ``_bottler.*`` topics are
    never read. Partitions are assigned by hand,
    all to this one process (a truncate moves every partition of its table topic); the consumer
    group ``group_id`` only keeps committed offsets, for sinks that do not store their own.

    ``skip``: ``skip(message) -> bool``, asked before a message is decoded; a message it
    skips only moves its partition's position (the replica seeded from a snapshot skips what
    the snapshot holds: :mod:`materializers.postgres.seeding.handover`).

    ``on_poison``: ``"dead-letter"`` sends an undecodable message, or one the sink rejects with
    :class:`RejectedChange`, to ``<prefix>._bottler.dead-letter`` (original key and value, the
    reason in headers) and goes on; ``"stop"`` raises :class:`PoisonMessage`.
    """

    def __init__(
        self,
        sink: Sink,
        *,
        bootstrap: Connection,
        registry: Registry,
        group_id: str,
        topics: Sequence[str] | None = None,
        prefix: str = "",
        pattern: str | None = None,
        on_poison: PoisonPolicy = "dead-letter",
        batch_size: int = 5000,
        batch_timeout: float = 0.5,
        live_batch_timeout: float = 0.05,
        watermark_interval: float = 1.0,
        progress: bool | None = None,
        consumer_config: dict[str, Any] | None = None,
        name: str | None = None,
        skip: Callable[[Message], bool] | None = None,
        join_group: bool = False,
        instance_id: str | None = None,
    ):
        name = name or group_id
        super().__init__(sink, name, bootstrap=bootstrap, group_id=group_id,
                         join_group=join_group, watermark_interval=watermark_interval,
                         truncate_topic=with_prefix(prefix, TRUNCATE))
        self.dead_letters = DeadLetters(on_poison, name=self.name, bootstrap=bootstrap,
                                        topic=with_prefix(prefix, DEAD_LETTER))
        self.skip = skip
        self.on_poison = self.dead_letters.policy
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.live_batch_timeout = live_batch_timeout
        self._keeping_up = False  # the last batch was not full
        self.watermark_interval = watermark_interval
        self.prefix = prefix
        self.dead_letter_topic = self.dead_letters.topic
        self.topics = list(topics) if topics is not None else None
        self.pattern = pattern
        # without topics or a pattern: the capture's own table topics, as it records them
        self.owned = (OwnedTopics(bootstrap, prefix, self.name)
                      if self.topics is None and not pattern else None)
        self.is_table_topic = self.owned or table_topics(prefix, self.topics, pattern)
        self._subscribed: list[str] = []  # the group subscription (join_group)
        self._consumer_config = _consumer_config(
            bootstrap, group_id, self.name, batch_size, join_group, instance_id,
            consumer_config)
        self.decoder = Decoder(registry)
        self._changes = ChangeReader(self.decoder, self.name)
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._background: ThreadPoolExecutor | None = None
        self._gave_back = False  # memory given back since caught up (once per run)
        self._rebuilding = False
        self._next_discovery = 0.0
        self._bar = ProgressBar(self.name, self.tracker)

    # -- start, assignment and stop -----------------------------------------------------

    def _open(self, stop: threading.Event, deadline: float | None = None) -> bool:
        self.tracker.revoke(self.tracker.partitions)  # lag() keeps its last value until here
        self.caught_up.clear()
        self._consumer = Consumer(self._consumer_config)
        self._marks = watermarks.Reader(self.bootstrap)
        self._background = ThreadPoolExecutor(1, thread_name_prefix=f"{self.name}-apply")
        self._gave_back = False
        self._next_discovery = 0.0
        if self.join_group:
            self._subscribe()
        else:
            self._discover()
        return True

    def _finish(self) -> None:
        self._settled()

    def _subscribe(self) -> None:
        """Join the group with the subscription; again when the capture's topics changed."""
        subscription = self._subscription()
        if subscription == self._subscribed:
            return
        self._subscribed = subscription
        self._subscribe_to(subscription)

    def _subscription(self) -> list[str]:
        """The group subscription: the listed table topics, the capture's own, or the pattern
        (librdkafka takes a name starting with ^ as a regex), and the truncate topic; partitions
        of a topic matched but not a table topic (other control topics) are left unassigned."""
        if self.topics is not None:
            return [*self.topics, self.truncate_topic]
        if self.owned is not None:
            owned = self.owned.refresh()
            self._next_discovery = time.monotonic() + (
                DISCOVERY_INTERVAL if self.owned.complete else 1.0)
            return [*sorted(owned), self.truncate_topic]
        regex = self.pattern
        return [regex if regex.startswith("^") else "^" + regex, self.truncate_topic]

    def _assigned_by_group(self, consumer: Consumer,
                           partitions: list[KafkaTopicPartition]) -> None:
        """A rebalance gave this instance ``partitions`` (all it holds: the assignment is
        eager): each resumes from the offsets stored with the data."""
        self._assigned.clear()
        self._position.clear()
        self._on_assign(consumer, partitions, whole=True)
        log.info("%s: holds %s", self.name, ", ".join(
            f"{t}[{p}]" for t, p in sorted(self._assigned)) or "no partition")
        if not self._assigned:  # so --once ends, rather than wait for partitions for ever
            self.tracker.holds_nothing()

    def _giving_up(self, keys: list[TopicPartition]) -> None:
        """Partitions go to another instance: the batch being applied is finished first (its
        offsets stored with it), so the next holder resumes exactly after it; a batch read but
        not applied yet is voided by the new generation."""
        # moved by another instance: nothing of it applied, the next holder reads on
        with contextlib.suppress(OffsetsMoved):
            self._settle()
        for key in keys:  # the group's generation is over: the next holder commits them
            self._pending_commit.pop(key, None)
            self._written.pop(key, None)

    def _discover(self) -> None:
        """Assign the partitions of matching topics not assigned yet: at start, then now and
        then for tables created later. Partitions are assigned by hand, not through a group
        rebalance: the sink knows where to start, and a killed predecessor still counted as a
        group member would otherwise hold the new process back until its session expired."""
        now = time.monotonic()
        if now < self._next_discovery:
            return
        self._next_discovery = now + DISCOVERY_INTERVAL
        found = discover_or_none(self._consumer, self.is_table_topic, self.truncate_topic,
                                 name=self.name)
        if found is None:  # a broker restarting: a pause, as for its watermarks
            self._next_discovery = now + 1.0
            return
        if self.owned is not None and not self.owned.complete:
            self._next_discovery = now + 1.0  # read the rest soon: not caught up before
        new = [KafkaTopicPartition(*tp) for tp in found if tp not in self._assigned]
        if new:
            self._on_assign(self._consumer, new)

    def _on_assign(self, consumer: Consumer, partitions: list[KafkaTopicPartition],
                   whole: bool = False) -> None:
        wanted = [
            tp for tp in partitions
            if tp.topic == self.truncate_topic or self.is_table_topic(tp.topic)
        ]
        keys = [(tp.topic, tp.partition) for tp in wanted]
        self._settled()  # the sink is called for one thing at a time
        stored = self.sink.stored_offsets(keys) if keys else {}
        if stored is None:
            committed = consumer.committed(wanted, timeout=30) if wanted else []
            start = {(c.topic, c.partition): max(c.offset, 0) for c in committed}
        else:
            start = {k: stored.get(k, 0) for k in keys}
        for tp in wanted:
            tp.offset = start[(tp.topic, tp.partition)]
        if whole:
            consumer.assign(wanted)
        else:
            consumer.incremental_assign(wanted)
        self._assigned |= set(keys)
        self._written.update(start)
        self._position.update(start)
        self.tracker.assign(start)
        self._sink_keeps_offsets = stored is not None
        self._rebuilding = bool(start) and not any(start.values())
        self._watermarks.reset()
        log.info("%s: assigned %d partitions%s", self.name, len(keys),
                 " (rebuilding from offset 0)" if self._rebuilding else "")

    def _close(self) -> None:
        if self._applying is not None:  # stopping on an error: the batch's own is secondary
            try:
                self._settle()
            except Exception as exc:  # noqa: BLE001 - the batch is replayed by the next run
                log.warning("%s: the batch being applied failed too: %s", self.name, exc)
        if self._background is not None:
            self._background.shutdown()
            self._background = None
        self._bar.close()
        self.dead_letters.close()
        if self.owned is not None:
            self.owned.close()
        self._subscribed = []
        if self._consumer is not None:
            self._commit_pending(asynchronous=False)
            try:
                self._consumer.close()
            finally:
                self._consumer = None
        self._assigned.clear()
        self._written.clear()

    # -- the loop -----------------------------------------------------------------------

    def step(self) -> None:
        """One batch: consume and decode it (while the previous one is still being applied),
        then write, flush and commit it; then refresh lag."""
        assert self._consumer is not None, "run() opens the consumer"
        timeout = self.batch_timeout
        if self._keeping_up and self.caught_up.is_set():
            timeout = min(timeout, self.live_batch_timeout)
        if not self.join_group:
            self._discover()
        elif self.owned is not None and time.monotonic() >= self._next_discovery:
            self._subscribe()  # a table the capture added since: a new subscription
        messages, consumed = self._consume(timeout)
        self._keeping_up = consumed < self.batch_size
        batch = self._collect(messages)
        if not self._settled():  # another instance moved our partitions: the batch is void
            batch = None
        if batch is not None:
            self._applying = (self._background.submit(self._apply, *batch), batch[1])
        if self._keeping_up:  # not behind: nothing to overlap, and the markers need it applied
            self._settled()
            self._past_markers()
        self._refresh_watermarks(force=self._keeping_up)
        if self.owned is None or self.owned.complete:  # else its topics are not all known
            self.tracker.check()
        if not self._gave_back and self.caught_up.is_set():
            self._gave_back = True
            gctune.give_back()  # the backlog's fetch buffers, freed by now
        if self.progress and self._rebuilding:
            self._rebuilding = self._bar.show()

    def _collect(self, messages: list[Message]
                 ) -> tuple[list[Change], Offsets, dict[int, Message]] | None:
        """(changes, offsets, their messages by change id) of a batch of messages, None if it
        moves no partition; the positions are ours from here on."""
        changes: list[Change] = []
        sources: dict[int, Message] = {}  # id(change) -> its message, for dead letters
        moved: dict[TopicPartition, int] = {}  # positions this batch brings partitions to
        stale: set[TopicPartition] = set()  # rewound: later messages of this list are stale

        def position(tp: TopicPartition) -> int | None:
            return moved.get(tp, self._position.get(tp))

        for msg in messages:
            error = msg.error()
            if error is not None:
                self._kafka_error(error, msg.topic())
                continue
            tp = (msg.topic(), msg.partition())
            offset = msg.offset()
            current = position(tp)
            if tp in stale:
                continue  # void (before a truncate's barrier) or refetched after a rewind
            if current is not None and offset < current:
                self._behind_us(tp, current, moved, stale)
                continue
            moved[tp] = offset + 1
            if self.skip is not None and self.skip(msg):
                continue  # the sink has it already (a seeded table): only the position moves
            if tp[0] == self.truncate_topic:
                change = self._truncate(msg, position, moved, stale)
            else:
                change = self._change(msg)
            if change is not None:
                changes.append(change)
                sources[id(change)] = msg
        if not moved:
            return None
        self._position.update(moved)
        return changes, moved, sources

    def _past_markers(self) -> None:
        """A transactional producer's commit markers take offsets that are never delivered (a
        translator's output topic under the same prefix has them): after a drained fetch, the
        client's position, past them, is ours too, or the lag would never reach zero. Only
        forward: a position behind ours is one we sought to."""
        assigned = [KafkaTopicPartition(t, p) for t, p in self._assigned]
        for tp in self._consumer.position(assigned) if assigned else ():
            key = (tp.topic, tp.partition)
            if tp.offset > self._position.get(key, 0):
                self._position[key] = tp.offset
                self.tracker.advance(key, tp.offset)

    def _change(self, msg: Message) -> Change | None:
        try:
            return self._changes.change(msg)
        except DecodeError as exc:
            self.dead_letters.message(msg, str(exc), "DecodeError")
            return None

    def _truncate(self, msg, position, moved, stale) -> Change | None:
        try:
            found = positions.barrier(self.decoder, msg, self.is_table_topic)
        except DecodeError as exc:
            self.dead_letters.message(msg, str(exc), "DecodeError")
            return None
        if found is None:
            return None
        change, barrier = found
        for tp, offset in positions.follow(self.name, barrier, position,
                                           self._assigned).items():
            if position(tp) is not None and tp in self._assigned:
                # Before the barrier the void messages are not fetched at all; past it, its
                # messages from the barrier on are fetched and applied again.
                self._consumer.seek(KafkaTopicPartition(*tp, offset))
                stale.add(tp)
            moved[tp] = offset
        return change

    def _behind_us(self, tp: TopicPartition, current: int, moved: dict[TopicPartition, int],
                   stale: set[TopicPartition]) -> None:
        """A message before our position that we did not seek to: the client reset its fetch
        position to the start because ours was out of range: the log lost its end."""
        for replayed in self._replay_lost([tp]):
            moved[replayed] = 0
            stale.add(replayed)  # the rest of this batch's messages of it: fetched again


def _consumer_config(bootstrap: Connection, group_id: str, name: str, batch_size: int,
                     join_group: bool, instance_id: str | None,
                     overrides: dict[str, Any] | None) -> dict[str, Any]:
    return consumer_config(
        bootstrap, group_id, join_group=join_group, instance_id=instance_id,
        # how `bottler status` names the instance
        client_id=instance_id or f"{name}@{socket.gethostname()}:{os.getpid()}",
        ours={
            "topic.metadata.refresh.interval.ms": 5000,
            # Prefetch two batches, not librdkafka's 100k messages (memory), and fetch again
            # 20 ms after the queue had its fill, not librdkafka's 1 s (a backlog's pace).
            "queued.min.messages": 2 * batch_size,
            "fetch.queue.backoff.ms": 20,
        }, overrides=overrides)
