"""The capture's own progress, kept in the compacted `_bottler.capture` topic: under the slot's
name, whether its snapshot is complete (and while it is not, the snapshot's layout, so a restart
resumes it: schemas/progress.py, which others read); under `<slot>/chunk/<id>`, each snapshot
chunk Kafka acknowledged, and under `<slot>/piece/<id>` how far into a chunk it acknowledged
(see SnapshotRecords); under `<slot>/incremental/<schema>.<table>`, each incremental snapshot
under way (incremental.py); under `topic/<topic>`, each table topic the capture owns
(TopicOwnership; schemas/ownership.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from capture.publish.errors import RESUME, producer_failed
from capture.setup import topics
from common.errors import BottlerError
from common.kafka import client_config, high_watermarks, reader_config
from schemas import ownership
from schemas.topics import STATE, with_prefix

# The start's first record goes to a topic made a moment before, whose leader the broker may
# not have taken up yet (NOT_LEADER_FOR_PARTITION): librdkafka asks again after 100 ms by
# default, on the path to the slot; after 10 ms here, backing off to its usual 1 s ceiling.
FIRST_RECORD_RETRY = {"topic.metadata.refresh.fast.interval.ms": 10, "retry.backoff.ms": 10}


class CaptureState:
    def __init__(self, bootstrap: str, prefix: str, extra_config: dict[str, str] | None = None):
        self.bootstrap = bootstrap
        self.topic = with_prefix(prefix, STATE)
        self.extra = extra_config or {}
        self._producer: Producer | None = None
        self._errors: list = []  # failed deliveries, reported by the next write or flush

    def _connection(self) -> dict[str, str]:
        return {**self.extra, "bootstrap.servers": self.bootstrap}

    def read(self, key: str) -> dict | None:
        """The last state recorded under ``key``."""
        return self.read_all().get(key)

    def read_all(self, admin=None) -> dict[str, dict]:
        """Every key's last recorded state, read from the start of the topic to its end;
        ``admin``: an AdminClient already connected to ask for its end through."""
        state: dict[str, dict] = {}
        try:
            # the admin's read waits while the partition has no leader: the capture's start reads
            # the topic right after making it (empty: no consumer is made, on the start's path)
            high = high_watermarks(self._connection(), [(self.topic, 0)],
                                   admin=admin)[(self.topic, 0)]
        except KafkaException as exc:
            raise topics.unreachable_broker(exc.args[0].str(), self.bootstrap) from None
        if high == 0:
            return state
        consumer = Consumer(reader_config(self._connection(), "capture-state"))
        try:
            consumer.assign([TopicPartition(self.topic, 0, 0)])
            position = 0
            while position < high:
                msg = consumer.poll(10)
                if msg is None:
                    raise BottlerError(f"cannot read the capture state from {self.topic}")
                if msg.error():
                    raise BottlerError(f"cannot read {self.topic}: {msg.error().str()}")
                position = msg.offset() + 1
                key = (msg.key() or b"").decode()
                if msg.value():
                    state[key] = json.loads(msg.value())
                else:
                    state.pop(key, None)
            return state
        except KafkaException as exc:
            raise topics.unreachable_broker(exc.args[0].str(), self.bootstrap) from None
        finally:
            consumer.close()

    def write(self, key: str, **state) -> None:
        """Record ``state`` under ``key``, durably (acknowledged) before returning."""
        self._produce({key: state})

    def record(self, key: str, **state) -> None:
        """Record ``state`` under ``key`` without waiting for the acknowledgement (flush()
        waits): for frequent records, where a lost one only means work done again."""
        self._produce({key: state}, wait=False)

    def flush(self) -> None:
        self._produce({})

    def forget(self, keys: list[str]) -> None:
        """Tombstones for ``keys``, so compaction removes them."""
        if keys:
            self._produce(dict.fromkeys(keys))

    def close(self) -> None:
        """Let go of the producer (it would keep retrying a broker that went away)."""
        self._producer = None

    def warm(self) -> None:
        """Start the producer now: an idempotent producer's first acknowledgement waits for
        its producer id (about 0.5 s here), which then happens while the capture does other
        work rather than before its slot is made."""
        if self._producer is None:
            self._producer = Producer(client_config(
                self._connection(),
                **{"enable.idempotence": True, "acks": "all"}, **FIRST_RECORD_RETRY))
            self._producer.poll(0)

    def _produce(self, states: dict[str, dict | None], wait: bool = True) -> None:
        self.warm()
        errors = self._errors
        try:
            for key, state in states.items():
                self._producer.produce(
                    self.topic, key=key.encode(),
                    value=None if state is None else json.dumps(state).encode(),
                    on_delivery=lambda err, _: errors.append(err) if err else None)
            if not wait:
                self._producer.poll(0)
                return
            unacknowledged = self._producer.flush(30)
        except KafkaException as exc:  # a fatal error (the broker lost the producer's state)
            raise producer_failed(f"the producer of {self.topic}", exc.args[0].str()) from None
        if unacknowledged or errors:
            raise BottlerError(
                f"cannot record the capture state in {self.topic}: "
                f"{errors[0].str() if errors else 'no acknowledgement'}", RESUME)


class TopicOwnership:
    """Records the table topics the capture owns (schemas/ownership.py), each acknowledged
    before the first row of its table is sent: the views read exactly these topics."""

    def __init__(self, state: CaptureState, prefix: str, slot: str, fmt: str):
        self.state, self.prefix, self.slot, self.fmt = state, prefix, slot, fmt
        self._claimed: dict[str, tuple[str, ...]] = {}  # by this run: topic -> key columns

    def claim(self, schema: str, table: str, topic: str, key: list[str] | tuple[str, ...]
              ) -> None:
        if self._claimed.get(topic) == tuple(key):
            return
        self.state.write(ownership.key(topic), **ownership.record(
            self.prefix, self.slot, schema, table, topic, key, self.fmt))
        self._claimed[topic] = tuple(key)

    def forget(self, topics: list[str]) -> None:
        """Tombstones for ``topics`` (deleted again by a failed start)."""
        self.state.forget([ownership.key(t) for t in topics if t in self._claimed])
        for topic in topics:
            self._claimed.pop(topic, None)


@dataclass(frozen=True)
class SnapshotRecords:
    """What a snapshot's workers acknowledged, recorded by the workers themselves (this is
    picklable: each worker process opens its own CaptureState). A record is written only once
    Kafka acknowledged every row it covers, and durably before the worker sends another row, so
    after any end of the capture (`kill -9` included) Kafka holds beyond the records at most
    the piece each worker had in hand."""

    bootstrap: str
    prefix: str
    slot: str
    lsn: int  # the snapshot's consistent point: records of another snapshot do not count
    extra: dict[str, str] = field(default_factory=dict)

    def open(self) -> CaptureState:
        return CaptureState(self.bootstrap, self.prefix, self.extra)

    def chunk_key(self, chunk_id: str) -> str:
        """The chunk's every row is in Kafka: a resumed snapshot skips it."""
        return f"{self.slot}/chunk/{chunk_id}"

    def piece_key(self, chunk_id: str) -> str:
        """The chunk's rows before page ``next_page`` are in Kafka: a resumed snapshot copies
        the chunk from there."""
        return f"{self.slot}/piece/{chunk_id}"

    def resume_pages(self, recorded: dict[str, dict]) -> dict[str, int]:
        """Chunk id → the page its copy resumes from, for chunks partly acknowledged."""
        prefix = self.piece_key("")
        return {key[len(prefix):]: value["next_page"] for key, value in recorded.items()
                if key.startswith(prefix) and value.get("lsn") == self.lsn}

    def keys(self, recorded: dict[str, dict], chunk_ids: list[str]) -> list[str]:
        """Every record of the snapshot: those read at the start and those of ``chunk_ids``."""
        prefixes = (self.chunk_key(""), self.piece_key(""))
        return ([k for k in recorded if k.startswith(prefixes)]
                + [key(c) for c in chunk_ids for key in (self.chunk_key, self.piece_key)])
