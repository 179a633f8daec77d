"""The warehouse as Spark users write it (``--route spark``, issue 27): Spark's Kafka source,
``from_avro`` on the bytes after Confluent's 5-byte header, the last change per key, and
delta-spark's ``DeltaTable.merge``. No Python worker and no row on the driver: the rows go from
the Kafka source through the JVM into Delta.

Per micro-batch (``foreachBatch``; ``trigger(availableNow=True)`` for ``--once``, a processing
time trigger for the continuous job), for each table topic that has rows in the batch:

1. decode (spark_avro.py): the value with the writer schema of its schema id (every version
   registered under the topic's subject), read as the topic's latest schema, so older rows take
   the newest columns and their Avro defaults; a tombstone is a delete, its key decoded alone;
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
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.errors import BottlerError
from common.kafka import Connection
from common.registry_client import Registry, registry_client
from materializers.core.changes import TopicPartition
from materializers.core.ownership import OwnedTopics
from materializers.core.poison import DeadLetters
from materializers.warehouse import kafka, stream
from materializers.warehouse.batch import DELETE, OFFSET, PARTITION
from materializers.warehouse.delta import app_id, claim, open_table, stored_offsets
from materializers.warehouse.sink import DeltaSink, table_path
from materializers.warehouse.spark_avro import TopicSchemas, decoded, rows, topic_schemas
from schemas.topics import DEAD_LETTER, TRUNCATE, table_topics, with_prefix

log = logging.getLogger(__name__)

ROUTES = ("python", "spark")  # --route: today's default, and this module
STOP_TIMEOUT = 10.0  # seconds a stopped query has for its batch (commits are atomic)
# the query's scratch checkpoint, named with the job's pid (upkeep.py removes a dead run's)
CHECKPOINT_PREFIX = "bottler-warehouse-checkpoint-"


# -- the Kafka client's properties for Spark's (Java) client ---------------------------------


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
                 name: str = "warehouse",
                 owned: OwnedTopics | None = None):
        self.spark, self.root = spark, Path(root)
        self.bootstrap, self.registry = bootstrap, registry
        self.client = registry_client(registry)
        self.prefix, self.name = prefix, name
        self.topics = list(topics) if topics else None
        self.max_messages = max_messages
        self.truncate_topic = with_prefix(prefix, TRUNCATE)
        self.dead_letters = DeadLetters(on_poison, name=name, bootstrap=bootstrap,
                                        topic=with_prefix(prefix, DEAD_LETTER))
        self._owned = owned or (OwnedTopics(bootstrap, prefix, name) if self.topics is None
                                else None)
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
        from materializers.core.ownership import discover

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
        checkpoint = Path(tempfile.mkdtemp(prefix=f"{CHECKPOINT_PREFIX}{os.getpid()}-"))
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
        for name, value in kafka.java_properties(self.bootstrap).items():
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
        stream.ended(query, failure, self.name)
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
