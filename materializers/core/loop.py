"""The consumer loop every materializer runs: topics → decoded changes → sink → commit.

Per batch: consume up to ``batch_size`` messages (or what arrives within ``batch_timeout``; once
caught up and while batches are not full, within ``live_batch_timeout``, so that a change waits
for its batch at most that long),
decode them, ``sink.write(changes, offsets)``, ``sink.flush()``, and only then commit the
consumer offsets. A failed write or flush raises out of :meth:`Materializer.run` with nothing
committed: the next run replays the batch (sinks are idempotent). While behind (full batches),
a batch is written and flushed in a thread of its own while the next one is consumed and
decoded: the target's time (a database executing the COPY, a cluster indexing) overlaps ours.
The sink is still called for one thing at a time, in order; lag counts a batch only once flushed.

Truncates are barriers and a partition that lost its log end is replayed (positions.py): the
loop moves its consumer as those say; the moved positions are part of the batch's offsets, so a
restart resumes from them. Poison messages follow the poison policy (poison.py); watermarks are
read as watermarks.py does, so a broker restart is a pause.
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
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition

from common import gctune
from common.errors import BottlerError
from common.kafka import Connection, client_config, denied, is_denied
from common.registry_client import Registry
from materializers.core import metrics, poison, positions, watermarks
from materializers.core.changes import Change, TableId, TopicPartition, table_of
from materializers.core.decode import DecodeError, Decoder
from materializers.core.lag import LagTracker
from materializers.core.ownership import OwnedTopics
from materializers.core.poison import DeadLetters, PoisonMessage, PoisonPolicy
from materializers.core.sink import Offsets, OffsetsMoved, Sink
from schemas.topics import DEAD_LETTER, TRUNCATE, table_topics, with_prefix

log = logging.getLogger(__name__)

__all__ = ["Materializer", "PoisonMessage", "PoisonPolicy"]

DISCOVERY_INTERVAL = 5.0  # seconds between looks for new table topics
# Seconds between the consumer group's commits when the sink keeps its own offsets: those
# commits only inform (tools listing groups), and every commit is a write to
# __consumer_offsets: one per batch during a rebuild would be thousands for nothing.
INFORMATIVE_COMMIT_INTERVAL = 30.0
# Instances sharing a group: a killed one's partitions move on after this long without heartbeat.
GROUP_SETTINGS = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                  "partition.assignment.strategy": "range,roundrobin"}  # eager: see _revoked


class Materializer:
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
        self.name = name or group_id
        # Share the partitions with the other instances of the view in ``group_id`` (a
        # consumer-group subscription) instead of assigning them all to this process.
        self.join_group = join_group
        self._generation = 0  # assignments so far (a rebalance during a consume voids it)
        self._written: dict[TopicPartition, int] = {}  # offsets stored by us, per held partition
        self.dead_letters = DeadLetters(on_poison, name=self.name, bootstrap=bootstrap,
                                        topic=with_prefix(prefix, DEAD_LETTER))
        self.sink = sink
        self.skip = skip
        self.bootstrap = bootstrap
        self.group_id = group_id
        self.on_poison = self.dead_letters.policy
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.live_batch_timeout = live_batch_timeout
        self._keeping_up = False  # the last batch was not full
        self._sink_keeps_offsets = False
        self._pending_commit: dict[TopicPartition, int] = {}  # not committed to the group yet
        self._next_informative_commit = 0.0
        self.watermark_interval = watermark_interval
        self.prefix = prefix
        self.truncate_topic = with_prefix(prefix, TRUNCATE)
        self.dead_letter_topic = self.dead_letters.topic
        self.topics = list(topics) if topics is not None else None
        self.pattern = pattern
        # without topics or a pattern: the capture's own table topics, as it records them
        self.owned = (OwnedTopics(bootstrap, prefix, self.name)
                      if self.topics is None and not pattern else None)
        self.is_table_topic = self.owned or table_topics(prefix, self.topics, pattern)
        self._subscribed: list[str] = []  # the group subscription (join_group)
        self._consumer_config = {
            **client_config(bootstrap),
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            "topic.metadata.refresh.interval.ms": 5000,
            # Prefetch two batches, not librdkafka's 100k messages (memory), and fetch again
            # 20 ms after the queue had its fill, not librdkafka's 1 s (a backlog's pace).
            "queued.min.messages": 2 * batch_size,
            "fetch.queue.backoff.ms": 20,
            **(GROUP_SETTINGS if join_group else {}),
            # static membership: an instance its supervisor restarts within the session
            # timeout takes its partitions back with no rebalance; a dead one's move to the
            # others once its session expires
            **({"group.instance.id": instance_id} if join_group and instance_id else {}),
            # how `bottler status` names the instance
            **({"client.id": instance_id or f"{self.name}@{socket.gethostname()}:{os.getpid()}"}
               if join_group else {}),
            **(consumer_config or {}),
        }
        self.decoder = Decoder(registry)
        self._tables: dict[int, TableId | None] = {}  # writer schema id -> its table
        self.tracker = LagTracker(self.name)
        self.progress = sys.stderr.isatty() if progress is None else progress
        self._consumer: Consumer | None = None
        self._background: ThreadPoolExecutor | None = None
        self._gave_back = False  # memory given back since caught up (once per run)
        self._applying: tuple[Future, Offsets] | None = None  # the batch being applied
        self._position: dict[TopicPartition, int] = {}
        self._assigned: set[TopicPartition] = set()
        self._rebuilding = False
        self._watermarks = watermarks.Schedule(watermark_interval)
        self._next_discovery = 0.0
        self._bar: Any = None

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
        """Process batches until ``stop_event`` is set; the consumer is closed at the end (the
        sink is not: its owner closes it)."""
        self._open()
        try:
            while stop_event is None or not stop_event.is_set():
                self.step()
            self._settled()
        finally:
            self._close()

    def run_until_caught_up(self, timeout: float | None = None) -> None:
        """Process until :attr:`caught_up` is set, then close the consumer and return.
        TimeoutError after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self._open()
        try:
            while not self.caught_up.is_set():
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"not caught up after {timeout}s: lag {self.lag()}")
                self.step()
            self._settled()
        finally:
            self._close()

    # -- the loop -----------------------------------------------------------------------

    def _open(self) -> None:
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

    def _subscribe(self) -> None:
        """Join the group with the subscription; again when the capture's topics changed."""
        subscription = self._subscription()
        if subscription == self._subscribed:
            return
        self._subscribed = subscription
        self._consumer.subscribe(subscription, on_assign=self._assigned_by_group,
                                 on_revoke=self._revoked, on_lost=self._revoked)

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
        self._generation += 1
        self._assigned.clear()
        self._position.clear()
        self._on_assign(consumer, partitions, whole=True)
        log.info("%s: holds %s", self.name, ", ".join(
            f"{t}[{p}]" for t, p in sorted(self._assigned)) or "no partition")
        if not self._assigned:  # so --once ends, rather than wait for partitions for ever
            self.tracker.holds_nothing()

    def _revoked(self, consumer: Consumer, partitions: list[KafkaTopicPartition]) -> None:
        """Partitions go to another instance: the batch being applied is finished first (its
        offsets stored with it), so the next holder resumes exactly after it; a batch read but
        not applied yet is voided by the new generation (step)."""
        self._generation += 1
        # moved by another instance: nothing of it applied, the next holder reads on
        with contextlib.suppress(OffsetsMoved):
            self._settle()
        keys = [(tp.topic, tp.partition) for tp in partitions]
        self.tracker.revoke(keys)
        for key in keys:  # the group's generation is over: the next holder commits them
            self._pending_commit.pop(key, None)
            self._assigned.discard(key)
            self._position.pop(key, None)
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
        metadata = self._consumer.list_topics(timeout=10)
        if self.owned is not None:
            self.owned.refresh(metadata.topics)
            if not self.owned.complete:  # read the rest soon: not caught up before
                self._next_discovery = now + 1.0
        new = [
            KafkaTopicPartition(topic, p)
            for topic, meta in metadata.topics.items()
            if topic == self.truncate_topic or self.is_table_topic(topic)
            for p in meta.partitions
            if (topic, p) not in self._assigned
        ]
        if new:
            self._on_assign(self._consumer, new)

    def _close(self) -> None:
        if self._applying is not None:  # stopping on an error: the batch's own is secondary
            try:
                self._settle()
            except Exception as exc:  # noqa: BLE001 - the batch is replayed by the next run
                log.warning("%s: the batch being applied failed too: %s", self.name, exc)
        if self._background is not None:
            self._background.shutdown()
            self._background = None
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
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

    def step(self) -> None:
        """One batch: consume and decode it (while the previous one is still being applied),
        then write, flush and commit it; then refresh lag."""
        assert self._consumer is not None, "run() opens the consumer"
        timeout = self.batch_timeout
        if self._keeping_up and self.caught_up.is_set():
            timeout = min(timeout, self.live_batch_timeout)
        generation = self._generation
        if not self.join_group:
            self._discover()
        elif self.owned is not None and time.monotonic() >= self._next_discovery:
            self._subscribe()  # a table the capture added since: a new subscription
        messages = self._consumer.consume(self.batch_size, timeout)
        self._keeping_up = len(messages) < self.batch_size
        if generation != self._generation:  # a rebalance within the consume
            self._refetch(messages)
            messages = []
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
        self._show_progress()

    def _refetch(self, messages: list[Message]) -> None:
        """Messages returned by a consume during which the assignment changed may come from
        before it: none is used; the partitions held now that they came from are read again
        from our positions (the others start there anyway)."""
        for tp in {(m.topic(), m.partition()) for m in messages if m.error() is None}:
            if tp in self._position and tp in self._assigned:
                # not fetching yet (KafkaException): it starts at the assigned offset, ours
                with contextlib.suppress(KafkaException):
                    self._consumer.seek(KafkaTopicPartition(*tp, self._position[tp]))

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

    def _settle(self) -> None:
        """Wait for the batch being applied: raise its failure, or count its offsets as done."""
        if self._applying is None:
            return
        future, offsets = self._applying
        self._applying = None
        future.result()
        for tp, offset in offsets.items():
            self.tracker.advance(tp, offset)

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
        key, value = msg.key(), msg.value()
        decode = self.decoder.decode
        try:
            vschema, vdatum = decode(value) if value is not None else (None, None)
            kschema, kdatum = (self.decoder.decode_key(key, vdatum) if key is not None
                               else (None, None))
            if kschema is None and vschema is None:
                raise DecodeError("a message with neither key nor value")
            if (kdatum is not None and kdatum.__class__ is not dict) or (
                    vdatum is not None and vdatum.__class__ is not dict):
                for datum in (kdatum, vdatum):
                    if datum is not None and not isinstance(datum, dict):
                        raise DecodeError(f"not an Avro record: {type(datum).__name__}")
        except DecodeError as exc:
            self.dead_letters.message(msg, str(exc), "DecodeError")
            return None
        writer = vschema if vschema is not None else kschema
        table = self._tables.get(writer.id, False)
        if table is False:
            table = self._tables[writer.id] = self._table_of(msg.topic(), writer.schema)
        if table is None:
            return None
        return Change(
            msg.topic(), table, "upsert" if vdatum is not None else "delete",
            kdatum, vdatum, msg.partition(), msg.offset(),
            kschema.id if kschema else None,
            vschema.id if vschema else None,
            kschema.schema if kschema else None,
            vschema.schema if vschema else None,
            None, msg.timestamp()[1],
        )

    def _table_of(self, topic: str, schema: dict) -> TableId | None:
        """The source table of a writer schema; None for a topic that is not a table topic
        (its records lack the capture's ``pg.table``: business events that a translator writes
        under the same prefix, say), whose messages are passed over."""
        if "pg.table" not in schema:
            log.warning("%s: %s is not a table topic (its records have no pg.table attribute):"
                        " passed over", self.name, topic)
            return None
        return table_of(schema)

    def _truncate(self, msg, position, moved, stale) -> Change | None:
        try:
            found = positions.barrier(self.decoder, msg, self.is_table_topic)
        except DecodeError as exc:
            self.dead_letters.message(msg, str(exc), "DecodeError")
            return None
        if found is None:
            return None
        change, barrier = found
        for tp, offset in barrier.items():
            current = position(tp)
            if current is not None and current != offset and tp in self._assigned:
                # Before the barrier the void messages are not fetched at all; past it, its
                # messages from the barrier on are fetched and applied again.
                self._consumer.seek(KafkaTopicPartition(*tp, offset))
                stale.add(tp)
                if current > offset:
                    log.info("%s: truncate of %s: replaying %s[%d] from %d", self.name, tp[0],
                             *tp, offset)
            if current is None or current != offset:
                moved[tp] = offset
        return change

    def _behind_us(self, tp: TopicPartition, current: int, moved: dict[TopicPartition, int],
                   stale: set[TopicPartition]) -> None:
        """A message before our position that we did not seek to: the client reset its fetch
        position to the start because ours was out of range: the log lost its end."""
        for replayed in self._replay_lost([tp]):
            moved[replayed] = 0
            stale.add(replayed)  # the rest of this batch's messages of it: fetched again

    def _replay_lost(self, lost: list[TopicPartition]) -> list[TopicPartition]:
        """Seek to 0 every partition :func:`positions.replayed` says; returns them."""
        replay = positions.replayed(self.name, lost, self._assigned, self.truncate_topic)
        for tp in replay:
            self._consumer.seek(KafkaTopicPartition(*tp, 0))
        return replay

    def _apply(self, changes: list[Change], offsets: Offsets,
               sources: dict[int, Message]) -> None:
        def content(change: Change) -> poison.Content:
            msg = sources[id(change)]
            return msg.key(), msg.value()

        applied = poison.apply(self.sink, changes, offsets, self.dead_letters, content)
        self._written.update({tp: o for tp, o in offsets.items() if tp in self._assigned})
        if self._sink_keeps_offsets:
            # The sink restarts from its own offsets: the group's commit is informative, made
            # now and then and at close, never holding up a batch.
            self._pending_commit.update(offsets)
            if time.monotonic() >= self._next_informative_commit:
                self._commit_pending(asynchronous=True)
        else:
            self._commit(offsets, asynchronous=False)
        metrics.BATCHES.labels(self.name).inc()
        metrics.count_changes(self.name, applied)

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

    def _denied(self, error: KafkaError, topic: str | None) -> BottlerError:
        """A refusal under the broker's ACLs: reading a topic, or using the group."""
        if error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED and topic:
            return denied(self.bootstrap, "READ", f"topic {topic}", error)
        if error.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
            return denied(self.bootstrap, "READ", f"consumer group {self.group_id}", error)
        return denied(self.bootstrap, "READ", "the topics and the consumer group "
                      f"{self.group_id}", error)

    # -- lag and progress ---------------------------------------------------------------

    def _kafka_error(self, error: KafkaError, topic: str | None = None) -> None:
        if error.fatal():
            raise KafkaException(error)
        if is_denied(error):
            raise self._denied(error, topic)
        if error.code() in (KafkaError._PARTITION_EOF, KafkaError.UNKNOWN_TOPIC_OR_PART):
            log.debug("%s: %s", self.name, error.str())
        else:
            log.warning("%s: %s", self.name, error.str())

    def _refresh_watermarks(self, force: bool) -> None:
        if not self._watermarks.due(force, self.caught_up.is_set()):
            return
        if not self._settled():  # a lost log end is judged against what was applied
            return
        self._moved_elsewhere()
        gone: set[str] = set()
        marks = watermarks.read(self._marks, self.tracker.partitions, self.name, gone)
        # in a group, the group's own rebalance takes a deleted topic's partitions away
        for tp in watermarks.drop_vanished(self._consumer, gone, self._assigned, self.name,
                                           unassign=not self.join_group):
            self._assigned.discard(tp)  # so discovery takes it again if it comes back
            self._position.pop(tp, None)
            self.tracker.revoke([tp])
        if marks is None:  # the broker restarting: the lag waits for it
            return
        lost = positions.lost_ends(self._position, {tp: h for tp, (_, h) in marks.items()})
        for tp in self._replay_lost(lost):
            self._position[tp] = 0
            self.tracker.advance(tp, 0)
        for tp, (low, high) in marks.items():
            self.tracker.observe(tp, low, high)

    def _show_progress(self) -> None:
        if not (self.progress and self._rebuilding):
            return
        if self._bar is None:
            from rich.progress import Progress

            self._bar = Progress(transient=False)
            self._bar.start()
            self._task = self._bar.add_task(f"rebuilding {self.name}", total=None)
        done, total = self.tracker.totals()
        self._bar.update(self._task, completed=done, total=total or None)
        if self.caught_up.is_set():
            self._bar.stop()
            self._bar = None
            self._rebuilding = False
