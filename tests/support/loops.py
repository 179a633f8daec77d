"""Test support for the core's behaviour tests: a hand-made table topic with the capture's wire
format, and every loop that ships (the consumer loop, the warehouse job, the translator runner)
driven the same way, so one test asserts one behaviour of each.

A loop reads a :class:`Topic` into a view: a :class:`~materializers.core.MemorySink` for the
consumer loop and the warehouse job (the reference sink: the loop is what is tested), the output
topic of a mirroring translator for the runner. ``rows(view)`` is ``{id: v}`` either way."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from materializers.core import Materializer, MemorySink
from materializers.translators import Event, Output, RowChange, Translator
from materializers.translators.runner import TranslatorRunner
from schemas import control
from schemas.serde import AvroEncoder
from tests.support.topics import own_topics, read_committed
from tests.support.waiting import in_thread, wait_for

VALUE = {"type": "record", "name": "t", "namespace": "public", "pg.schema": "public",
         "pg.table": "t", "fields": [{"name": "id", "type": "int"},
                                     {"name": "v", "type": ["null", "string"], "default": None}]}
KEY = {"type": "record", "name": "t", "namespace": "public.key", "pg.schema": "public",
       "pg.table": "t", "fields": [{"name": "id", "type": "int"}]}


class Topic:
    """A hand-made table topic ``<prefix>.t`` with the capture's wire format and schemas."""

    def __init__(self, stack, partitions: int = 1):
        self.stack = stack
        self.prefix = f"m{uuid.uuid4().hex[:8]}"
        self.name = f"{self.prefix}.t"
        self.truncates = f"{self.prefix}._bottler.truncate"
        self.dead_letters = f"{self.prefix}._bottler.dead-letter"
        admin = AdminClient({"bootstrap.servers": stack.kafka})
        for future in admin.create_topics([
            NewTopic(self.name, num_partitions=partitions, config={"cleanup.policy": "compact"}),
            NewTopic(self.truncates, num_partitions=1),
        ]).values():
            future.result(30)
        own_topics(stack.kafka, self.prefix, ("public", "t", ["id"]))  # as a capture does
        registry = SchemaRegistryClient({"url": stack.registry_url})

        def encoder(subject, schema):
            schema_id = registry.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
            return AvroEncoder(schema_id, schema).encode

        self.key = encoder(f"{self.name}-key", KEY)
        self.value = encoder(f"{self.name}-value", VALUE)
        self.truncate_event = encoder(f"{self.truncates}-value", control.TRUNCATE)
        self.producer = Producer({"bootstrap.servers": stack.kafka})
        self.count = {}

    def put(self, id_, v="x", partition=0, raw_value=None):
        value = raw_value if raw_value is not None else (
            None if v is None else self.value({"id": id_, "v": v}))
        self.producer.produce(self.name, key=self.key({"id": id_}), value=value,
                              partition=partition)
        self.count[partition] = self.count.get(partition, 0) + 1

    def truncate(self, offsets=None):
        self.producer.flush(30)
        event = {"topic": self.name, "schema": "public", "table": "t", "lsn": 1,
                 "commit_time": 0, "offsets": {str(p): o for p, o in
                                               (offsets or self.count).items()},
                 "cascade": False, "restart_identity": False}
        self.producer.produce(self.truncates, key=self.name.encode(),
                              value=self.truncate_event(event))
        self.producer.flush(30)

    def recreate(self) -> None:
        """Delete the topic and create it again, empty: what a broker that lost the end of
        the log looks like to a reader (its offsets now hold other messages)."""
        self.producer.flush(30)
        admin = AdminClient({"bootstrap.servers": self.stack.kafka})
        admin.delete_topics([self.name])[self.name].result(30)
        wait_for(lambda: self.name not in admin.list_topics(timeout=10).topics, 30, "deletion")
        admin.create_topics([NewTopic(self.name, 1, config={"cleanup.policy": "compact"})])[
            self.name].result(30)
        self.count = {}

    def materializer(self, sink, group=None, **options):
        self.producer.flush(30)
        return Materializer(sink, bootstrap=self.stack.kafka, registry=self.stack.registry_url,
                            group_id=group or f"g-{uuid.uuid4().hex[:8]}", prefix=self.prefix,
                            batch_timeout=0.2, **{"progress": False, **options})


def ids(sink) -> dict:
    return {k[0][1]: v["v"] for k, v in sink.rows("public", "t").items()}


def committed(stack, group, topic, partition=0) -> int:
    consumer = Consumer({"bootstrap.servers": stack.kafka, "group.id": group})
    try:
        return consumer.committed([TopicPartition(topic, partition)], timeout=10)[0].offset
    finally:
        consumer.close()


# -- the loops -------------------------------------------------------------------------------

Refuse = Callable[[dict], str | None]  # a row -> why the view refuses it, or None


class ConsumerLoop:
    """The consumer loop (``Materializer``), as the replica and the search index run it."""

    name = "consumer loop"
    error = "RejectedChange"  # the dead letter's bottler.error for a refused change

    def __init__(self, stack, request):
        self.stack = stack

    def view(self, refuse: Refuse | None = None, sink=None):
        if sink is not None:
            return sink
        return MemorySink(reject=None if refuse is None else
                          lambda c: refuse(c.value) if c.value else None)

    def catch_up(self, topic: Topic, view, group: str | None = None, **options) -> None:
        topic.materializer(view, group=group, **options).run_until_caught_up(timeout=60)

    @contextmanager
    def running(self, topic: Topic, view):
        materializer = topic.materializer(view, watermark_interval=0.05)
        with in_thread(materializer.run) as failure:
            yield failure

    def rows(self, view) -> dict:
        return ids(view)

    def count(self, view) -> int:
        """Rows in the view; safe while the loop runs in its thread."""
        return len(view.rows("public", "t"))

    def offset(self, view, tp) -> int | None:
        return view.offsets.get(tp)


class WarehouseLoop(ConsumerLoop):
    """The warehouse job (``WarehouseJob``): Spark reads the ranges, the driver writes the sink."""

    name = "warehouse job"

    def __init__(self, stack, request):
        super().__init__(stack, request)
        self.spark = request.getfixturevalue("spark")

    def job(self, topic: Topic, view, **options):
        from materializers.warehouse.job import WarehouseJob

        topic.producer.flush(30)
        return WarehouseJob(self.spark, "-", bootstrap=self.stack.kafka,  # "-": the sink is ours
                            registry=self.stack.registry_url, prefix=topic.prefix, sink=view,
                            **options)

    def catch_up(self, topic: Topic, view, group: str | None = None, **options) -> None:
        job = self.job(topic, view, **options)
        try:
            job.run_until_caught_up()
        finally:
            job.close()

    @contextmanager
    def running(self, topic: Topic, view):
        job = self.job(topic, view)
        try:
            with in_thread(lambda stop: job.run(stop, interval=0.05)) as failure:
                yield failure
        finally:
            job.close()


MIRROR_VALUE = {"type": "record", "name": "Mirrored", "fields": [
    {"name": "v", "type": ["null", "string"], "default": None},
    {"name": "deleted", "type": "boolean"}]}
MIRROR_KEY = {"type": "record", "name": "MirrorKey", "fields": [{"name": "id", "type": "int"}]}


@dataclass
class Mirror:
    """A translator's view: its group, and what its translate function refuses (raises on)."""

    group: str = field(default_factory=lambda: f"g-{uuid.uuid4().hex[:8]}")
    refuse: Refuse | None = None
    topic: str = ""  # the output topic, once a runner was made

    def translator(self) -> Translator:
        def translate(change: RowChange):
            reason = self.refuse(change.row) if self.refuse and change.row else None
            if reason:
                raise ValueError(reason)
            return [Event("mirror", change.key, {"v": (change.row or {}).get("v"),
                                                 "deleted": change.row is None})]

        return Translator("mirror", ["t"], [Output("mirror", MIRROR_KEY, MIRROR_VALUE)],
                          translate, keep_previous=False)


class TranslatorLoop:
    """The translator runner (``TranslatorRunner``): its view is its output topic."""

    name = "translator runner"
    error = "ValueError"  # a translate function that raises is the translator's refusal

    def __init__(self, stack, request):
        self.stack = stack
        self._decode: AvroDeserializer | None = None

    def view(self, refuse: Refuse | None = None, sink=None) -> Mirror:
        assert sink is None, "a translator has no sink"
        return Mirror(refuse=refuse)

    def runner(self, topic: Topic, view: Mirror, **options) -> TranslatorRunner:
        topic.producer.flush(30)
        view.topic = f"{topic.prefix}.mirror"
        return TranslatorRunner(view.translator(), bootstrap=self.stack.kafka,
                                registry=self.stack.registry_url, topic_prefix=topic.prefix,
                                group_id=view.group, batch_timeout=0.1, **options)

    def catch_up(self, topic: Topic, view: Mirror, group: str | None = None, **options) -> None:
        self.runner(topic, view, **options).run_until_caught_up(timeout=60)

    @contextmanager
    def running(self, topic: Topic, view: Mirror):
        with in_thread(self.runner(topic, view, watermark_interval=0.05).run) as failure:
            yield failure

    def rows(self, view: Mirror) -> dict:
        """The rows the events say, in order (a key's events are in one partition)."""
        if self._decode is None:
            self._decode = AvroDeserializer(SchemaRegistryClient({"url": self.stack.registry_url}))
        decode = self._decode
        rows = {}
        for msg in read_committed(self.stack.kafka, view.topic):
            key = decode(msg.key(), SerializationContext(view.topic, MessageField.KEY))
            value = decode(msg.value(), SerializationContext(view.topic, MessageField.VALUE))
            if value["deleted"]:
                rows.pop(key["id"], None)
            else:
                rows[key["id"]] = value["v"]
        return rows

    def count(self, view: Mirror) -> int:
        return len(self.rows(view))

    def offset(self, view: Mirror, tp) -> int | None:
        offset = committed(self.stack, view.group, *tp)
        return None if offset < 0 else offset


LOOPS = {"consumer loop": ConsumerLoop, "warehouse job": WarehouseLoop,
         "translator runner": TranslatorLoop}
