"""Which table topics a view reads when it is given no ``--topic``: exactly those its capture
records as its own in ``[prefix.]_bottler.capture`` (schemas/ownership.py). So a view never
reads another prefix's topics, nor a topic bottler did not write, the empty prefix included.

:class:`OwnedTopics` is the ``topic -> bool`` predicate every loop filters the broker's topics
with; :meth:`OwnedTopics.refresh`, called with each look for new topics, reads the records the
capture added since (a table it started capturing later). A capture that predates the records
has written none: the view then reads nothing and says so in one line, until the capture is
restarted with a version that writes them (or the view is given its topics with ``--topic``).

:func:`discover` is the one look for the partitions a view reads, with either predicate: the
consumer loop's, the translator's (its inputs) and the warehouse's (its driver and its stream's
planner).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Collection
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from common.kafka import Connection, broker_away, reader_config
from materializers.core.changes import TopicPartition
from schemas import ownership
from schemas.topics import STATE, with_prefix

log = logging.getLogger(__name__)

_MISSING = (KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART,
            KafkaError._UNKNOWN_TOPIC)


def discover(client: Any, is_table_topic: Callable[[str], bool],
             truncate_topic: str | None = None) -> list[TopicPartition]:
    """The partitions of the topics the view reads, sorted: its table topics' (``is_table_topic``,
    refreshed first when it is an :class:`OwnedTopics`) and the truncate topic's. ``client``:
    a consumer or an admin client (anything with ``list_topics``); the broker's topics are
    listed all at once (asking for one by name may create it)."""
    metadata = client.list_topics(timeout=10)
    if isinstance(is_table_topic, OwnedTopics):
        is_table_topic.refresh(metadata.topics)
    return sorted((topic, p) for topic, meta in metadata.topics.items()
                  if topic == truncate_topic or is_table_topic(topic)
                  for p in meta.partitions)


def discover_or_none(client: Any, is_table_topic: Callable[[str], bool],
                     truncate_topic: str | None = None, *,
                     name: str) -> list[TopicPartition] | None:
    """:func:`discover`; None while the broker cannot list its topics (restarting, or slower
    than the listing's timeout on a busy machine): for the caller a pause, not its end."""
    try:
        return discover(client, is_table_topic, truncate_topic)
    except KafkaException as exc:
        if not broker_away(exc.args[0]):
            raise
        log.warning("%s: topics unknown for now: %s", name, exc.args[0].str())
        return None


class OwnedTopics:
    """``topic -> bool``: is ``topic`` a table topic of the capture of ``prefix``?"""

    def __init__(self, bootstrap: Connection, prefix: str, name: str):
        self.bootstrap = bootstrap
        self.prefix = prefix
        self.name = name
        self.topic = with_prefix(prefix, STATE)
        self.owned: dict[str, dict] = {}  # topic -> its ownership record
        self._records: dict[str, dict] = {}  # key -> latest ownership record
        self._consumer: Consumer | None = None
        self._position = 0
        # the records were read to the end once: until then the view is not caught up
        self.complete = False
        self._said: str | None = None  # the last situation logged, so each is said once

    def __call__(self, topic: str) -> bool:
        return topic in self.owned

    def __getstate__(self) -> dict:
        """Pickled (the warehouse's stream planner runs in a process of its own): a reader that
        starts afresh there, with a consumer of its own."""
        fresh = OwnedTopics(self.bootstrap, self.prefix, self.name)
        return dict(fresh.__dict__)

    def refresh(self, existing: Collection[str] | None = None) -> set[str]:
        """Read the records added since the last refresh; the owned topics. ``existing``: the
        broker's topics, when the caller has them (else they are asked for: the control topic is
        never asked for by name, which would make a broker that creates topics on demand create
        it, without the capture's settings)."""
        if existing is None:
            try:
                existing = self._client().list_topics(timeout=10).topics
            except KafkaException as exc:
                log.debug("%s: cannot list topics now: %s", self.name, exc.args[0].str())
                return set(self.owned)
        if self.topic not in existing:
            if self._position:  # deleted (the capture retired): a new one is read anew
                self._position = 0
                self._records.clear()
                self.owned = {}
            self._say("absent", logging.INFO,
                      "%s: no capture of prefix %s on the broker yet (no topic %s): reading no "
                      "table topic until it starts", self.name, self._shown(), self.topic)
            self.complete = True  # nothing to read: caught up with nothing, as before
            return set(self.owned)
        try:
            self._read()
        except KafkaException as exc:  # the broker restarting: the set stays as it was
            if exc.args[0].code() in _MISSING:
                self._say("absent", logging.INFO,
                          "%s: no capture of prefix %s on the broker yet (no topic %s): reading "
                          "no table topic until it starts", self.name, self._shown(), self.topic)
                return set(self.owned)
            log.debug("%s: cannot read %s now: %s", self.name, self.topic, exc.args[0].str())
            return set(self.owned)
        if not self.owned:
            self._say("none", logging.WARNING,
                      "%s: no topic ownership records in %s yet: if the capture of prefix %s "
                      "is of an earlier version of bottler, restart it with this one (it records "
                      "its table topics there), or give the topics with --topic; reading no "
                      "table topic until then", self.name, self.topic, self._shown())
        else:
            self._say(f"{len(self.owned)}", logging.INFO,
                      "%s: reading the %d table topic(s) the capture of prefix %s owns",
                      self.name, len(self.owned), self._shown())
        return set(self.owned)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    def _client(self) -> Consumer:
        if self._consumer is None:
            # a fetch of the last read can still wait at the broker (librdkafka's 500 ms) when
            # the next refresh asks for the watermarks, which the broker answers after it
            # (docs/warehouse.md, "A warm server's steady state"): its fetches wait 10 ms at most
            self._consumer = Consumer(reader_config(
                self.bootstrap, "ownership", **{"auto.offset.reset": "earliest",
                                                "enable.partition.eof": False,
                                                "fetch.wait.max.ms": 10}))
        return self._consumer

    def _read(self) -> None:
        partition = KafkaTopicPartition(self.topic, 0)
        _, high = self._client().get_watermark_offsets(partition, timeout=10, cached=False)
        if high < self._position:  # the topic was deleted and created again: read it anew
            self._records.clear()
            self._position = 0
        if self._position < high:
            # assigned only while read: nothing to fetch between two reads
            self._consumer.assign([KafkaTopicPartition(self.topic, 0, self._position)])
            try:
                self._read_to(high)
            finally:
                self._consumer.unassign()
        self.owned = ownership.owned(self._records)
        self.complete = self.complete or self._position >= high

    def _read_to(self, high: int) -> None:
        partition = KafkaTopicPartition(self.topic, 0)
        deadline = time.monotonic() + 10
        while self._position < high:
            msg = self._consumer.poll(0.5)
            if msg is None:
                # past a compacted tail the client's position moves on with no message
                at = self._consumer.position([partition])[0].offset
                self._position = max(self._position, at)
                if self._position < high and time.monotonic() > deadline:
                    break  # read on at the next refresh
                continue
            if msg.error():
                log.debug("%s: %s: %s", self.name, self.topic, msg.error().str())
                continue
            self._position = msg.offset() + 1
            key = (msg.key() or b"").decode(errors="replace")
            if not key.startswith(ownership.KEY_PREFIX):
                continue  # the capture's progress records
            try:
                value = json.loads(msg.value()) if msg.value() else None
            except ValueError:
                continue  # not the capture's: nothing to learn from it
            if value is None:
                self._records.pop(key, None)
            elif ownership.is_record(key, value):
                self._records[key] = value

    def _shown(self) -> str:
        return self.prefix or "(empty)"

    def _say(self, situation: str, level: int, message: str, *args) -> None:
        if situation != self._said:
            self._said = situation
            log.log(level, message, *args)
