"""How a seed waits for its capture: until the capture's progress records say that its slot and
its tables' topics are made, and what the registry holds of each table topic's schemas."""

from __future__ import annotations

import json
import logging
import time

from confluent_kafka import Consumer, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.schema_registry.error import SchemaRegistryError

from common.kafka import reader_config
from materializers.postgres.seeding import Stopped
from schemas import progress as progress_records
from schemas.topics import STATE, with_prefix

log = logging.getLogger(__name__)

CAPTURE_WAIT_LOG = 10.0  # seconds between "waiting for the capture" lines
CAPTURE_POLL = 0.02  # seconds between looks at the capture's records (each a cheap request)
LOOK_WAIT = 10  # ms a fetch of the seed's looking consumer may wait at the broker for records
# A seed marks itself from its start (see _mark), but while its capture has not started a
# snapshot, for at most this many seconds: a seed waiting for a capture that is not there (a
# wrong prefix) must not hold up the snapshot of another capture of the same database.
MARK_ALONE = 10.0


class CaptureWatch:
    """The :class:`~materializers.postgres.seeding.seeder.Seeder`'s looks at its capture: its
    progress records, its table topics and their schemas. Expects the seeder's ``prefix``,
    ``bootstrap``, ``decoder``, ``is_table_topic``, ``stop``, ``marker`` and ``marked_at``,
    ``capture_state``, ``read_state`` and ``looker``, and its ``_mark`` and ``_unmark``."""

    def _wait_for_capture(self) -> None:
        """Until the capture has made its slot and its tables' topics: its progress record
        names a snapshot with its layout (written after both), or one complete or skipped."""
        topic = with_prefix(self.prefix, STATE)
        said = 0.0
        consumer = self._looker()
        while not self._capture_ready(consumer, topic):
            if (self.marker is not None and time.monotonic() - self.marked_at > MARK_ALONE
                    and not any(s and progress_records.is_started(s)
                                for s in self.capture_state.values())):
                self._unmark()  # no snapshot of its capture under way: hold up no other
            if time.monotonic() - said >= CAPTURE_WAIT_LOG:
                log.info("seed: waiting for the capture (prefix %r) to create its slot and"
                         " topics (%s)", self.prefix, topic)
                said = time.monotonic()
            if self.stop.wait(CAPTURE_POLL):
                raise Stopped()

    def _consumer(self) -> Consumer:
        """A consumer that only looks (watermarks, metadata, the capture's records). Its fetches
        wait at most LOOK_WAIT at the broker: one left waiting at the end of the records when
        the look ends delays the next look's first fetch by as long (librdkafka sends one
        fetch at a time to a broker), half a second by default, on the seed's critical path."""
        return Consumer(reader_config(self.bootstrap, "seed", **{"fetch.wait.max.ms": LOOK_WAIT}))

    def _capture_ready(self, consumer: Consumer, topic: str) -> bool:
        """Reads the capture's records (from where the last look ended); a snapshot starting
        marks the seed (``_mark``), one with its layout (or complete, or skipped) is ready."""
        tp = KafkaTopicPartition(topic, 0, 0)
        try:
            _, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        except KafkaException:
            return False  # no such topic yet
        if high <= self.read_state:
            return False
        # assigned only while it reads: nothing to fetch between two reads
        consumer.assign([KafkaTopicPartition(topic, 0, self.read_state)])
        try:
            while self.read_state < high:
                msg = consumer.poll(10)
                if msg is None or msg.error():
                    return False
                self.read_state = msg.offset() + 1
                key = (msg.key() or b"").decode()
                if progress_records.is_slot_key(key):
                    self.capture_state[key] = json.loads(msg.value()) if msg.value() else None
        finally:
            consumer.unassign()
        states = [s for s in self.capture_state.values() if s]
        if any(progress_records.is_started(s) for s in states):
            self._mark()
        return any(progress_records.slot_and_topics_made(s) for s in states)

    def _looker(self) -> Consumer:
        """The seed's one consumer that only looks (closed when the seed ends)."""
        if self.looker is None:
            self.looker = self._consumer()
        return self.looker

    def _topics(self) -> dict[str, list[int]]:
        """The table topics and their partitions."""
        metadata = self._looker().list_topics(timeout=10)
        refresh = getattr(self.is_table_topic, "refresh", None)  # the capture's own topics
        if refresh is not None:
            refresh(metadata.topics)
        return {t: sorted(m.partitions) for t, m in metadata.topics.items()
                if self.is_table_topic(t)}

    def _latest(self, topic: str) -> tuple[tuple[int, dict], dict | None] | None:
        """((value schema id, value schema), key schema) of the topic's latest registration;
        None if it has no value schema of a table."""
        versions = self._versions(topic)
        if not versions:
            return None
        value = versions[0]
        if "pg.table" not in value[1]:
            return None
        key = self._subject_latest(f"{topic}-key")
        return value, (key[1] if key else None)

    def _versions(self, topic: str) -> list[tuple[int, dict]]:
        """The value schemas of ``topic``, newest first, as (id, schema as the loop reads it)."""
        registry = self.decoder.registry
        try:
            numbers = registry.get_versions(f"{topic}-value")
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return []
            raise
        found = []
        for number in sorted(numbers, reverse=True):
            registered = registry.get_version(f"{topic}-value", number)
            found.append((registered.schema_id,
                          self.decoder.schema(registered.schema_id).schema))
        return found

    def _subject_latest(self, subject: str) -> tuple[int, dict] | None:
        try:
            registered = self.decoder.registry.get_latest_version(subject)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return None
            raise
        return registered.schema_id, self.decoder.schema(registered.schema_id).schema

    # -- copy ----------------------------------------------------------------------------
