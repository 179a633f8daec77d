"""The warehouse as Spark users write it (``--route spark``, issue 27): Spark's Kafka source,
``from_avro`` on the bytes after Confluent's 5-byte header, the last change per key, and
delta-spark's ``DeltaTable.merge``. No Python worker and no row on the driver: the rows go from
the Kafka source through the JVM into Delta.

Per micro-batch (``foreachBatch``; ``trigger(availableNow=True)`` for ``--once``, a processing
time trigger for the continuous job), for each table topic that has rows in the batch:

1. decode: the value with the writer schema of its schema id (every version registered under
   the topic's subject), read as the topic's latest schema, so older rows take the newest
   columns and their Avro defaults; a tombstone is a delete, its key decoded alone;
2. keep the last change per key by ``(partition, offset)`` (``max_by``, a hash aggregate);
3. one Delta commit: a MERGE (``whenMatchedDelete`` for deletes, ``whenMatchedUpdateAll`` and
   ``whenNotMatchedInsertAll`` for upserts), or the table's first rows appended, or an unkeyed
   table's rows appended; the commit records the topic-partition's next offset as its Delta
   transaction identifier (``txnAppId``/``txnVersion``), so a replayed batch commits nothing
   twice. A table with no change in the batch gets no commit.

Delta stays the truth: the query starts from the offsets the tables recorded (read before it
starts, ``startingOffsets``); its checkpoint is a scratch directory of the run.

Not yet done on this route (the default route does them; see docs/warehouse.md): truncates (a
truncate event stops the job with one line), a column added with a default filled into the rows
already in Delta, PostgreSQL array columns, and table topics of several partitions (delta-spark
records one transaction identifier per commit).
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import BottlerError
from common.kafka import Connection, properties
from common.registry_client import Registry, registry_client
from materializers.core.changes import TableId, TopicPartition, table_of
from materializers.core.ownership import OwnedTopics
from materializers.core.poison import DeadLetters
from materializers.warehouse import stream
from materializers.warehouse.batch import DELETE, OFFSET, PARTITION
from materializers.warehouse.delta import app_id, claim, open_table, stored_offsets
from materializers.warehouse.sink import DeltaSink, table_path
from materializers.warehouse.types import (
    DATE_MAX,
    DATE_MIN,
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    TS_MAX,
    TS_MIN,
    column_name,
)
from schemas.avro_names import resolve_names
from schemas.pgtypes import array_branches
from schemas.temporal import logical_temporal
from schemas.topics import DEAD_LETTER, TRUNCATE, table_topics, with_prefix

log = logging.getLogger(__name__)

ROUTES = ("python", "spark")  # --route: today's default, and this module
STOP_TIMEOUT = 10.0  # seconds a stopped query has for its batch (commits are atomic)


# -- the Kafka client's properties for Spark's (Java) client ---------------------------------


def java_properties(connection: Connection) -> dict[str, str]:
    """The client properties of the configuration file (librdkafka's names) as the Java client
    of Spark's Kafka source takes them, each as a ``kafka.``-prefixed option: SASL's user and
    password become its JAAS line, a PEM CA file its truststore; the rest pass as they are."""
    props = properties(connection)
    out: dict[str, str] = {}
    user, password = props.pop("sasl.username", None), props.pop("sasl.password", None)
    mechanism = props.get("sasl.mechanism", props.pop("sasl.mechanisms", "PLAIN"))
    if user is not None:
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule"
                  if mechanism.upper() == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        quoted = [json.dumps(v) for v in (user, password or "")]
        out["sasl.jaas.config"] = (f"{module} required username={quoted[0]} "
                                   f"password={quoted[1]};")
        out["sasl.mechanism"] = mechanism
    if (ca := props.pop("ssl.ca.location", None)) is not None:
        out["ssl.truststore.type"] = "PEM"
        out["ssl.truststore.location"] = ca
    if props.pop("enable.ssl.certificate.verification", "true") == "false":
        out["ssl.endpoint.identification.algorithm"] = ""
    for name, value in props.items():
        out.setdefault(name, str(value))
    return {f"kafka.{k}": v for k, v in out.items()}


# -- the registry's schemas as Spark expressions ----------------------------------------------


@dataclass
class TopicSchemas:
    """A table topic's writer schemas by id (every version of its subjects) and its latest."""

    values: dict[int, str]
    keys: dict[int, str]
    latest: dict  # the latest value schema, parsed (as the logical temporal mode has it)
    latest_key: dict | None

    @property
    def table(self) -> TableId:
        return table_of(self.latest)

    def key_columns(self) -> list[str] | None:
        if self.latest_key is None:
            return None
        names = {f["name"]: column_name(f) for f in self.latest["fields"]}
        return [names.get(f["name"], column_name(f)) for f in self.latest_key["fields"]]


def topic_schemas(client: Any, topic: str) -> TopicSchemas | None:
    """The schemas of ``topic``'s subjects (TopicNameStrategy); None if it has no value
    subject yet (nothing but tombstones can be in it)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    def versions(subject: str) -> dict[int, str]:
        try:
            found = client.get_versions(subject)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return {}
            raise
        return {(r := client.get_version(subject, v)).schema_id: r.schema.schema_str
                for v in found}

    values, keys = versions(f"{topic}-value"), versions(f"{topic}-key")
    if not values:
        return None
    latest = logical_temporal(json.loads(values[max(values)]))
    latest_key = logical_temporal(json.loads(keys[max(keys)])) if keys else None
    return TopicSchemas(values, keys, latest, latest_key)


def decoded(column: str, writers: dict[int, str], reader: dict) -> Any:
    """The framed Avro ``column`` decoded by ``from_avro`` with its schema id's writer schema,
    read as ``reader``: null for an id not among ``writers`` or a body that does not decode."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention
    from pyspark.sql.avro.functions import from_avro

    schema_id = F.conv(F.hex(F.substring(column, 2, 4)), 16, 10).cast("int")
    body = F.expr(f"substring(`{column}`, 6)")
    reader_json = json.dumps(reader)
    branches = []
    for sid, writer in sorted(writers.items()):
        options = {"mode": "PERMISSIVE"}
        if json.loads(writer) != reader:
            options["avroSchema"] = reader_json  # the writer's rows read as the latest version
        branches.append(F.when(schema_id == sid, from_avro(body, writer, options)))
    framed = F.substring(column, 1, 1) == F.lit(b"\x00")
    return F.when(framed, F.coalesce(*branches))


def _clamped(c: Any, lo: int, hi: int, neg: int, pos: int, kind: str) -> Any:
    """±infinity (the int extremes) to the ends of Delta's range, as types.py does; a finite
    value outside it is null here, and its row a poison row (:func:`column`). ``kind``: date,
    timestamp or timestamp_ntz (read as UTC: the session's time zone, job.spark_session)."""
    from pyspark.sql import functions as F  # noqa: N812

    if kind == "date":
        raw, to = F.unix_date(c), lambda v: F.date_from_unix_date(F.lit(v))
    else:
        raw = F.unix_micros(c.cast("timestamp"))
        to = lambda v: F.timestamp_micros(F.lit(v)).cast(kind)  # noqa: E731
    return (F.when(raw == pos, to(hi)).when(raw == neg, to(lo))
            .when((raw >= lo) & (raw <= hi), c))


def column(avro: Any, c: Any, named: dict) -> tuple[Any, Any]:
    """The Delta column of one decoded Avro field (``c``), as types.py maps it, and a condition
    true where the value does not fit Delta (a decimal's NaN, a date out of range); None when
    every value fits."""
    from pyspark.sql import functions as F  # noqa: N812

    if isinstance(avro, str) and avro in named:
        return column(named[avro], c, named)
    if isinstance(avro, list):
        if array_branches(avro, named) is not None:
            raise BottlerError("the spark route does not map PostgreSQL array columns yet",
                               "run the warehouse without --route spark")
        branches = [b for b in avro if b != "null"]
        if len(branches) == 1:
            return column(branches[0], c, named)
        first = branches[0] if branches else None
        if (isinstance(first, dict) and first.get("logicalType") == "decimal"
                and branches[1:] == ["string"]):
            return c.getField("member0"), c.getField("member1").isNotNull()
        return F.to_json(c), None
    if isinstance(avro, dict):
        kind, logical = avro.get("type"), avro.get("logicalType")
        if kind == "int" and logical == "date":
            fit = _clamped(c, DATE_MIN, DATE_MAX, INT_MIN, INT_MAX, "date")
            return fit, c.isNotNull() & fit.isNull()
        if kind == "long" and logical in ("timestamp-micros", "local-timestamp-micros"):
            fit = _clamped(c, TS_MIN, TS_MAX, LONG_MIN, LONG_MAX,
                           "timestamp" if logical == "timestamp-micros" else "timestamp_ntz")
            return fit, c.isNotNull() & fit.isNull()
        if kind == "enum":
            return c.cast("string"), None
    return c, None


def rows(schema: dict, struct: str, prefix: str = "") -> tuple[list[Any], Any]:
    """The Delta columns of the record ``schema`` decoded into column ``struct``, and the
    condition of a row that does not fit (None: every row fits)."""
    from pyspark.sql import functions as F  # noqa: N812

    resolved, named = resolve_names(schema)
    out, unfit = [], None
    for f in resolved["fields"]:
        c, bad = column(f["type"], F.col(f"{struct}.`{f['name']}`"), named)
        out.append(c.alias(prefix + column_name(f)))
        if bad is not None:
            unfit = bad if unfit is None else unfit | bad
    return out, unfit


# -- the job ------------------------------------------------------------------------------


@dataclass
class RouteResult:
    messages: int = 0
    changes: int = 0
    dead_letters: int = 0
    commits: int = 0
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


class SparkRoute:
    """Loads the table topics into Delta tables under ``root`` (the job's prefix_root) with
    Spark's Kafka source, ``from_avro`` and delta-spark (the module docstring)."""

    def __init__(self, spark: Any, root: Path, *, bootstrap: Connection, registry: Registry,
                 prefix: str = "", topics: Iterable[str] | None = None,
                 on_poison: str = "dead-letter", max_messages: int = 1_000_000,
                 name: str = "warehouse"):
        self.spark, self.root = spark, Path(root)
        self.bootstrap, self.registry = bootstrap, registry
        self.client = registry_client(registry)
        self.prefix, self.name = prefix, name
        self.topics = list(topics) if topics else None
        self.max_messages = max_messages
        self.truncate_topic = with_prefix(prefix, TRUNCATE)
        self.dead_letters = DeadLetters(on_poison, name=name, bootstrap=bootstrap,
                                        topic=with_prefix(prefix, DEAD_LETTER))
        self._owned = OwnedTopics(bootstrap, prefix, name) if self.topics is None else None
        self._is_table_topic = self._owned or table_topics(prefix, self.topics)
        self.sink = DeltaSink(self.root)  # the offsets the tables recorded, their owners

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
        self.dead_letters.close()

    def run_until_caught_up(self) -> RouteResult:
        return self._stream({"availableNow": True})

    def run(self, stop: threading.Event, interval: float) -> RouteResult:
        return self._stream({"processingTime": f"{interval} seconds"}, stop)

    # -- the query ------------------------------------------------------------------------

    def _partitions(self) -> list[TopicPartition]:
        from confluent_kafka import Consumer

        from common.kafka import reader_config
        from materializers.warehouse.job import discover

        consumer = Consumer(reader_config(self.bootstrap, "warehouse-planner"))
        try:
            found = discover(consumer, self._is_table_topic, self.truncate_topic)
            # the capture's topic ownership read to its end (discover refreshes it)
            while self._owned is not None and not self._owned.complete:
                time.sleep(0.5)
                found = discover(consumer, self._is_table_topic, self.truncate_topic)
            return found
        finally:
            consumer.close()

    def _stream(self, trigger: dict, stop: threading.Event | None = None) -> RouteResult:
        partitions = self._partitions()
        total = RouteResult()
        if not partitions:
            log.info("%s: no table topic yet", self.name)
            return total
        start = {tp: 0 for tp in partitions} | self.sink.stored_offsets(partitions)
        starting: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in start.items():
            starting.setdefault(topic, {})[str(partition)] = offset
        positions = dict(start)  # where each batch begins
        checkpoint = Path(tempfile.mkdtemp(prefix="bottler-warehouse-checkpoint-"))
        failure: list[BaseException] = []

        def each(frame: Any, batch_id: int) -> None:
            if failure:
                return
            ends = stream.batch_ends(checkpoint, batch_id, kafka=True)
            try:
                result = self.batch(frame, ends, positions)
                positions.update(ends)
            except BottlerError as exc:  # one line, not Spark's stack traces
                failure.append(exc)
                return
            total.messages += result.messages
            total.changes += result.changes
            total.dead_letters += result.dead_letters
            total.commits += result.commits
            total.offsets.update(result.offsets)

        reader = self.spark.readStream.format("kafka")
        for name, value in java_properties(self.bootstrap).items():
            reader = reader.option(name, value)
        query = (reader.option("assign", json.dumps({t: sorted(int(p) for p in ps)
                                                     for t, ps in starting.items()}))
                 .option("startingOffsets", json.dumps(starting))
                 .option("maxOffsetsPerTrigger", str(self.max_messages * len(partitions)))
                 .option("minPartitions", str(self.spark.sparkContext.defaultParallelism))
                 .option("failOnDataLoss", "false")  # compaction leaves gaps
                 .load().writeStream.foreachBatch(each)
                 .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())
        try:
            while query.isActive and not failure and not (stop is not None and stop.wait(0.2)):
                query.awaitTermination(0.2)
        finally:
            if query.isActive:
                query.stop()
            shutil.rmtree(checkpoint, ignore_errors=True)
        if failure:
            raise failure[0]
        if query.exception() is not None:
            raise RuntimeError(f"{self.name}: the streaming query failed: {query.exception()}")
        return total

    # -- one batch ------------------------------------------------------------------------

    def batch(self, frame: Any, ends: dict[TopicPartition, int],
              begins: dict[TopicPartition, int]) -> RouteResult:
        """One micro-batch of Spark's Kafka rows, from ``begins`` up to ``ends`` (the source's
        offsets, from the query's offset log): each table topic that moved merged."""
        from pyspark.sql import functions as F  # noqa: N812

        started = time.monotonic()
        result = RouteResult()
        moved = {tp: end for tp, end in ends.items() if end > begins.get(tp, 0)}
        for topic in sorted({t for t, _ in moved}):
            offsets = {tp: end for tp, end in moved.items() if tp[0] == topic}
            result.messages += sum(end - begins.get(tp, 0) for tp, end in offsets.items())
            if topic == self.truncate_topic:
                raise BottlerError(
                    f"{self.name}: a truncate (topic {topic}): the spark route does not "
                    "apply truncates yet", "run the warehouse without --route spark")
            self._topic(frame.where(F.col("topic") == topic), topic, offsets, result)
        if result.messages:
            log.info("%s: %d messages (%.0f/s), %d commits in %.1f s", self.name,
                     result.messages, result.messages / max(time.monotonic() - started, 1e-6),
                     result.commits, time.monotonic() - started)
        return result

    def _topic(self, frame: Any, topic: str, offsets: dict[TopicPartition, int],
               result: RouteResult) -> None:
        from pyspark.sql import functions as F  # noqa: N812

        if len(offsets) > 1:
            raise BottlerError(
                f"{topic} has {len(offsets)} partitions: delta-spark records one transaction "
                "identifier per commit", "run the warehouse without --route spark")
        schemas = topic_schemas(self.client, topic)
        if schemas is None:
            return
        columns, unfit = rows(schemas.latest, "v")
        frame = frame.select("partition", "offset", "key", "value",
                             decoded("value", schemas.values, schemas.latest).alias("v"))
        poison = F.col("value").isNotNull() & F.col("v").isNull()
        if unfit is not None:
            poison = poison | (F.col("v").isNotNull() & unfit)
        # decoded once: the poison rows are looked for in what the merge then reads
        frame = frame.withColumn("_poison", poison).persist()
        try:
            self._dead_letters(frame.where("_poison"), topic, result)
            self._write(frame.where("NOT _poison"), topic, schemas, columns, offsets, result)
        finally:
            frame.unpersist()

    def _write(self, frame: Any, topic: str, schemas: TopicSchemas, columns: list[Any],
               offsets: dict[TopicPartition, int], result: RouteResult) -> None:
        from pyspark.sql import functions as F  # noqa: N812

        keys = schemas.key_columns()
        path = table_path(self.root, schemas.table)
        self.sink._check_own(path, schemas.table, offsets)
        table = open_table(path)
        if keys is None:  # unkeyed: every upsert appended with its place in the topic
            source = frame.where("value IS NOT NULL").select(
                *columns, F.col("partition").alias(PARTITION), F.col("offset").alias(OFFSET))
            result.changes += self._commit(
                path, offsets, lambda txn: source.write.format("delta").mode("append")
                .options(**txn).option("mergeSchema", "true").save(str(path)))
            result.commits += 1
            result.offsets.update(offsets)
            return
        key_columns, _ = rows(schemas.latest_key, "k", "_key_")
        keyed = frame.select(
            "partition", "offset", "v",
            decoded("key", schemas.keys, schemas.latest_key).alias("k"),
            F.col("value").isNull().alias(DELETE))
        # the last change of each key, by (partition, offset): a hash aggregate, no sort
        last = keyed.groupBy("k").agg(F.max_by(F.struct("v", DELETE), F.struct(
            "partition", "offset")).alias("last")).select("k", "last.*")
        source = last.select(*columns, *key_columns, DELETE)
        for k in keys:  # a delete's key columns come from its key
            source = source.withColumn(k, F.coalesce(F.col(k), F.col(f"_key_{k}")))
        source = source.drop(*[f"_key_{k}" for k in keys])
        if table is None:  # its first rows: an append of the upserts
            claim(path)
            first = source.where(f"NOT {DELETE}").drop(DELETE)
            result.changes += self._commit(
                path, offsets, lambda txn: first.write.format("delta").mode("append").options(**txn)
                .save(str(path)))
        else:
            result.changes += self._commit(path, offsets,
                                           lambda _txn: self._merge(str(path), source, keys))
        result.commits += 1
        result.offsets.update(offsets)

    def _merge(self, path: str, source: Any, keys: list[str]) -> None:
        from delta.tables import DeltaTable

        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in keys)
        (DeltaTable.forPath(self.spark, path).alias("t").merge(source.alias("s"), on)
         .whenMatchedDelete(f"s.{DELETE}")
         .whenMatchedUpdateAll(f"NOT s.{DELETE}")
         .whenNotMatchedInsertAll(f"NOT s.{DELETE}").execute())

    def _commit(self, path: Path, offsets: dict[TopicPartition, int], write) -> int:
        """``write(txn)`` as one Delta commit recording ``offsets`` (one topic-partition) as its
        transaction identifier: a DataFrame write takes ``txn`` as its options, a MERGE the same
        from the session's configuration. A batch replayed after a crash finds its version
        recorded and commits nothing."""
        (tp, offset), = offsets.items()
        table = open_table(path)
        if table is not None and (stored_offsets(table, [tp]).get(tp, -1) >= offset):
            return 0  # committed already (a replay)
        conf = self.spark.conf
        conf.set("spark.databricks.delta.schema.autoMerge.enabled", "true")
        conf.set("spark.databricks.delta.write.txnAppId", app_id(tp))
        conf.set("spark.databricks.delta.write.txnVersion", str(offset))
        try:
            write({"txnAppId": app_id(tp), "txnVersion": str(offset)})
        finally:
            conf.unset("spark.databricks.delta.write.txnAppId")
            conf.unset("spark.databricks.delta.write.txnVersion")
        return _rows(open_table(path))

    def _dead_letters(self, poison: Any, topic: str, result: RouteResult) -> None:
        """Messages that do not decode, or whose values Delta cannot hold: a handful, collected
        by their place and set aside under the poison policy."""
        for row in poison.select("partition", "offset", "key", "value").collect():
            self.dead_letters.at(topic, row["partition"], row["offset"],
                                 "does not decode with its schema id's writer schema, or holds "
                                 "a value Delta cannot", "DecodeError",
                                 (row["key"], row["value"]))
            result.dead_letters += 1
        if result.dead_letters:
            self.dead_letters.flush()


def _rows(table: Any) -> int:
    """The source rows of the table's last commit (its operation metrics): the changes it
    applied after the per-key dedupe."""
    metrics = (table.history(1)[0].get("operationMetrics") or {}) if table is not None else {}
    return int(metrics.get("numSourceRows") or metrics.get("numOutputRows") or 0)
