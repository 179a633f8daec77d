"""Topics read back: every message, what a read_committed consumer sees, decoded with the
registry, as the table a compacted topic describes; table topics owned as a capture owns them."""

from __future__ import annotations

import time
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.waiting import wait_for


def read_topic(bootstrap: str, topic: str) -> list:
    """Every message of ``topic``, partition by partition, up to the current end; KeyError if
    the topic does not exist."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        # Ask for all topics: asking for one by name may make the broker auto-create it.
        metadata = consumer.list_topics(timeout=10).topics[topic]
        messages = []
        for p in sorted(metadata.partitions):
            _, high = _high_watermark(consumer, TopicPartition(topic, p))
            if high == 0:
                continue
            consumer.assign([TopicPartition(topic, p, 0)])
            while True:
                msg = consumer.poll(10)
                assert msg is not None, f"no message from {topic}[{p}] before offset {high}"
                assert not msg.error(), msg.error()
                messages.append(msg)
                if msg.offset() + 1 >= high:
                    break
        return messages
    finally:
        consumer.close()


# A topic made a moment ago is in the metadata before its partition has a leader that serves it
_NOT_SERVED_YET = {KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                   KafkaError.UNKNOWN_TOPIC_OR_PART}


def _high_watermark(consumer: Consumer, tp: TopicPartition) -> tuple[int, int]:
    """The partition's watermarks, once its leader serves it (a few milliseconds after the topic
    is made; at most 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=10)
        except KafkaException as exc:
            if exc.args[0].code() not in _NOT_SERVED_YET or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def read_committed(bootstrap: str, topic: str, isolation: str = "read_committed") -> list:
    """Every message of ``topic`` a consumer of that isolation level sees, up to the end it sees
    now ([] if the topic does not exist): for read_committed, the last stable offset (where the
    oldest transaction still open begins: a busy transactional writer always has one), else the
    high watermark. A partition is read once the consumer's position reached that end (past
    transaction markers and aborted messages) or it said end of partition."""
    from common.kafka import stable_ends

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        meta = consumer.list_topics(timeout=10).topics.get(topic)
        if meta is None:
            return []
        if isolation == "read_committed":
            ends = {p: end for (_, p), end in stable_ends(
                bootstrap, [(topic, p) for p in meta.partitions]).items()}
        else:
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                      cached=False)[1] for p in meta.partitions}
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        messages = []
        last = time.monotonic()  # of the last message or end
        while pending:
            msg = consumer.poll(1.0)
            if msg is not None:
                last = time.monotonic()
            if msg is not None and msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                pending.discard(msg.partition())
            elif msg is not None:
                messages.append(msg)
                if msg.offset() + 1 >= ends[msg.partition()]:
                    pending.discard(msg.partition())
            else:
                at = consumer.position([TopicPartition(topic, p) for p in pending])
                pending -= {tp.partition for tp in at if tp.offset >= ends[tp.partition]}
                assert time.monotonic() - last < 30, f"{topic}: stuck 30 s before {ends}"
        return [m for m in messages if m.offset() < ends[m.partition()]]
    finally:
        consumer.close()


class Decoder:
    """Decodes with confluent-kafka's own AvroDeserializer (what any consumer would use)."""

    def __init__(self, registry_url: str):
        self._deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))

    def key(self, msg):
        ctx = SerializationContext(msg.topic(), MessageField.KEY)
        return self._deserializer(msg.key(), ctx) if msg.key() is not None else None

    def value(self, msg):
        ctx = SerializationContext(msg.topic(), MessageField.VALUE)
        return self._deserializer(msg.value(), ctx) if msg.value() is not None else None

    def table_state(self, messages) -> dict:
        """The table a compacted topic describes: last value per key, tombstones removing."""
        state = {}
        for msg in messages:
            key = tuple(sorted(self.key(msg).items()))
            value = self.value(msg)
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        return state


def topic_state(stack, topic: str, expected_keys: int | None = None) -> dict:
    decoder = Decoder(stack.registry_url)

    def state():
        try:
            messages = read_topic(stack.kafka, topic)
        except KeyError:  # the topic does not exist yet
            return None
        current = decoder.table_state(messages)
        if expected_keys is None or len(current) == expected_keys:
            return [current]  # truthy even when empty
        return None

    return wait_for(state, 60, f"{topic} to hold {expected_keys} keys")[0]


def own_topics(bootstrap: str, prefix: str, *tables: tuple[str, str, list[str]]) -> None:
    """Record the table topics of ``tables`` ((schema, table, key columns)) as the capture of
    ``prefix`` does (capture/setup/state.py, schemas/ownership.py): for hand-made table topics,
    which a view given no --topic reads only once their capture says they are its own."""
    from confluent_kafka.admin import AdminClient

    from capture.setup.state import CaptureState, TopicOwnership
    from capture.setup.topics import ensure_topics
    from schemas.topics import table_topic

    state = CaptureState(bootstrap, prefix)
    ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [state.topic])
    owner = TopicOwnership(state, prefix, prefix or "test", "avro")
    for schema, table, key in tables:
        owner.claim(schema, table, table_topic(prefix, schema, table), key)
    state.close()


def copied(stack, topic: str) -> int:
    """Messages in ``topic`` (one partition), from its end offset."""
    consumer = Consumer({"bootstrap.servers": stack.kafka, "group.id": f"c-{uuid.uuid4().hex}"})
    try:
        if topic not in consumer.list_topics(timeout=10).topics:
            return 0
        return _high_watermark(consumer, TopicPartition(topic, 0))[1]
    finally:
        consumer.close()
