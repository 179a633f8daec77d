"""The conformance adapter for the warehouse's spark route (materializers/warehouse/native.py).

The suite's changes are a topic's log: each change's offset is its place in its topic. Written,
they are produced into real topics of a prefix of the test's own (``p.items`` is
``<prefix>.items``), with the capture's wire format and schemas registered in the registry; a
change already in its topic (a replay) is not produced again. Each flush is one batch of the
route (``SparkRoute.batch``) over a batch read of Spark's Kafka source, from the first offset
written (before where the tables stand, for a replay) up to the offsets written: what a
micro-batch of its streaming query does. The tables are read back with delta-rs, as for the
default route (conformance_warehouse.py).

``spark`` commits every batch with delta-spark; ``spark-driver`` merges them on the driver with
delta-rs, as the CLI does a batch under ``--driver-merge-below`` (spark_merge.py).

``spark-connect``: the same route (delta-spark's commits) as a Spark Connect client
(``--spark-remote``) of the tests' spark route session (tests/support/spark.py), each flush a
``bottler materialize warehouse --route spark --spark-remote … --once`` process (pyspark takes a
process for one kind of session: the tests' is a local one). It reads from where the tables
stand, so a change written again (a replay) is not read again: the table is what it was, as a
replay must leave it."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from materializers.core import Change, TopicPartition
from materializers.warehouse.job import prefix_root
from materializers.warehouse.native import SparkRoute
from materializers.warehouse.sink import DeltaSink
from schemas import control
from schemas.serde import AvroEncoder
from tests.support.cli import bottler
from tests.support.conformance_warehouse import rows

TRUNCATES = "p._bottler.truncate"  # the suite's truncate topic (conformance.offsets_of)


class Topics:
    """The Kafka side shared by a test's sinks: its prefix, its topics and what they hold."""

    def __init__(self, stack):
        self.stack = stack
        self.prefix = f"c{uuid.uuid4().hex[:8]}"
        self.next: dict[str, int] = {}  # topic -> its next offset
        self.registry = SchemaRegistryClient({"url": stack.registry_url})
        self.producer = Producer({"bootstrap.servers": stack.kafka})
        self._encoders: dict[tuple[str, str], AvroEncoder] = {}

    def name(self, topic: str) -> str:
        return self.prefix + topic[1:] if topic.startswith("p.") else topic

    def suite_name(self, topic: str) -> str:
        return "p" + topic[len(self.prefix):] if topic.startswith(self.prefix + ".") else topic

    def encode(self, subject: str, schema: dict, record: dict) -> bytes:
        # the suite's key schema keeps its value field's null default, which Avro refuses
        schema = {**schema, "fields": [
            {k: v for k, v in f.items() if k != "default" or isinstance(f["type"], list)}
            for f in schema["fields"]]}
        text = json.dumps(schema)
        encoder = self._encoders.get((subject, text))
        if encoder is None:
            schema_id = self.registry.register_schema(subject, Schema(text, "AVRO"))
            encoder = self._encoders[(subject, text)] = AvroEncoder(schema_id, schema)
        return encoder.encode(record)

    def produce(self, changes: Sequence[Change]) -> None:
        for c in changes:
            topic = self.name(TRUNCATES if c.op == "truncate" else c.topic)
            if c.offset < self.next.get(topic, 0):
                continue  # in the topic already: a replay
            self._create(topic)
            assert c.offset == self.next[topic], f"{topic}: offset {c.offset} out of order"
            self.next[topic] += 1
            if c.op == "truncate":
                event = {"topic": self.name(c.topic), "schema": c.table.schema,
                         "table": c.table.table, "lsn": 1, "commit_time": 0,
                         "offsets": {str(p): o for p, o in c.barrier.items()},
                         "cascade": False, "restart_identity": False}
                key, value = topic.encode(), self.encode(f"{topic}-value", control.TRUNCATE,
                                                         event)
            else:
                key = (self.encode(f"{topic}-key", c.key_schema, c.key)
                       if c.key is not None else None)
                value = (self.encode(f"{topic}-value", c.value_schema, c.value)
                         if c.op == "upsert" else None)
            self.producer.produce(topic, key=key, value=value, partition=c.partition)
        self.producer.flush(30)

    def _create(self, topic: str) -> None:
        if topic in self.next:
            return
        admin = AdminClient({"bootstrap.servers": self.stack.kafka})
        admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(30)
        self.next[topic] = 0


class SparkSink:
    """The spark route behind the Sink protocol (see the module docstring)."""

    def __init__(self, spark, stack, topics: Topics, root, driver_merge_below: int = 0):
        self.root, self.topics = root, topics
        self.route = SparkRoute(
            spark, root, bootstrap=stack.kafka, registry=stack.registry_url,
            prefix=topics.prefix, topics=[topics.name("p.items"), topics.name("p.log")],
            driver_merge_below=driver_merge_below)
        self.pending: dict[TopicPartition, tuple[int, int]] = {}  # written: (first, end)

    def stored_offsets(self, partitions: Sequence[TopicPartition]) -> dict:
        found = DeltaSink(self.root).stored_offsets(
            [(self.topics.name(t), p) for t, p in partitions])
        return {(self.topics.suite_name(t), p): o for (t, p), o in found.items()}

    def write(self, changes: Sequence[Change], offsets: dict) -> None:
        self.topics.produce(changes)
        for c in changes:
            tp = (self.topics.name(TRUNCATES if c.op == "truncate" else c.topic), c.partition)
            first, end = self.pending.get(tp, (c.offset, c.offset + 1))
            self.pending[tp] = (min(first, c.offset), max(end, c.offset + 1))

    def flush(self) -> None:
        pending, self.pending = self.pending, {}
        if not pending:
            return
        known = [(t, 0) for t in self.topics.next]
        begins = {tp: 0 for tp in known} | DeltaSink(self.root).stored_offsets(known)
        for tp, (first, _) in pending.items():
            begins[tp] = min(begins[tp], first)
        frame = self.route._read({tp: (begins[tp], end) for tp, (_, end) in pending.items()},
                                 split=True)
        self.route.batch(frame, {tp: end for tp, (_, end) in pending.items()}, begins)

    def close(self) -> None:
        self.pending.clear()
        if self.route is not None:
            self.route.close()
            self.route = None


class ConnectSink(SparkSink):
    """The route over Spark Connect, a process per flush (see the module docstring)."""

    def __init__(self, remote: str, stack, topics: Topics, path):
        self.remote, self.stack, self.path = remote, stack, path
        self.root, self.topics, self.route = prefix_root(path, topics.prefix), topics, None
        self.pending = {}

    def flush(self) -> None:
        pending, self.pending = self.pending, {}
        if not pending:
            return
        proc = bottler("materialize", "warehouse", "--route", "spark", "--once",
                       "--spark-remote", self.remote, "--path", str(self.path),
                       "--topic-prefix", self.topics.prefix, "--driver-merge-below", "0",
                       "--topic", self.topics.name("p.items"), "--topic",
                       self.topics.name("p.log"), "--broker", self.stack.kafka,
                       "--schema-registry", self.stack.registry_url, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def adapter(request, cleanup):
    from tests.support.conformance import Adapter

    tmp, stack = request.getfixturevalue("tmp_path"), request.getfixturevalue("stack")
    spark = request.getfixturevalue("spark_native")
    topics = Topics(stack)
    count = iter(range(1_000_000))
    sinks: list[SparkSink] = []
    remote = request.getfixturevalue("spark_sessions").remote  # that session's Connect
    over_connect = request.param == "spark-connect"
    driver_merge_below = 1_000_000 if request.param == "spark-driver" else 0

    def sink(path) -> SparkSink:
        sinks.append(ConnectSink(remote, stack, topics, path) if over_connect
                     else SparkSink(spark, stack, topics, path, driver_merge_below))
        return sinks[-1]

    def make() -> SparkSink:
        return sink(tmp / f"warehouse{next(count)}")

    def reopen(old: SparkSink) -> SparkSink:
        old.close()  # the process died: its unflushed batch is gone with it
        return sink(old.path if over_connect else old.root)

    cleanup.callback(lambda: [s.close() for s in sinks])
    return Adapter(
        make, reopen,
        lambda sink, table, columns: {(row[0],): row for row in rows(sink, table, columns)},
        lambda sink, table, columns: sorted(rows(sink, table, columns)),
        max_flushes=2, loop=False,
    )
