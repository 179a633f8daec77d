"""The warehouse load: a PySpark job merging the table topics into Delta tables.

Per micro-batch, on the driver:

1. the table topics (``--topic``, or those the capture of the prefix owns: core/ownership.py)
   and their partitions; where
   each starts: the offsets the Delta tables recorded (:meth:`DeltaSink.stored_offsets`);
2. the truncate control topic's new events, read here (a handful): each moves its table
   topic's partitions to the truncate's barrier, and a partition whose log lost its end is
   read again from the start (both as the consumer loop does: materializers/core/positions.py);
3. the offset ranges up to the high watermarks (at most ``max_messages`` per partition), cut
   into Spark partitions of ``chunk`` offsets;

then Spark reads and decodes the ranges in parallel (source.py, or Spark's Kafka connector where
its jars are: kafka.py) and keeps the last event per key by (partition, offset) — a window over
the key; the executors stage the survivors as Parquet (staging.py), and the driver hands each
table's files, read as a stream, after the batch's truncates, to the :class:`DeltaSink` with the
offsets the ranges end at: one Delta commit per table, its offsets in it (sink.py). No row
passes through the driver's Python heap. So the MERGE, the truncates and the offsets have one
implementation, shared with the consumer loop's path. A batch with nothing new (the watermarks
say so) runs no Spark job.

Poison messages (undecodable, or refused by the sink) go to ``<prefix>._bottler.dead-letter``
or stop the job, by the core's poison policy (materializers/core/poison.py); watermarks are read
as the core reads them (a broker restart is a pause: the batch finds nothing new).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from common.kafka import Connection, client_config
from common.registry import Registry
from materializers.core import metrics, poison, positions, watermarks
from materializers.core.changes import Change, TopicPartition, table_of
from materializers.core.decode import DecodeError
from materializers.core.ownership import OwnedTopics
from materializers.core.poison import DeadLetters
from materializers.core.sink import Sink
from materializers.warehouse import jvm, kafka, staging
from materializers.warehouse.delta import DeltaWriter, writer_for
from materializers.warehouse.sink import DeltaSink
from materializers.warehouse.source import NAME, KafkaRanges, decoder, option_value, read_range
from schemas.topics import DEAD_LETTER, TRUNCATE, table_topics, with_prefix

log = logging.getLogger(__name__)

STAGING = "_bottler_staging"  # under the warehouse: each batch's staged rows, removed after it


def spark_session(master: str = "local[2]", app: str = "bottler-warehouse"):
    """A Spark session whose Python workers run this interpreter (so they import bottler), with
    the ``bottler_kafka`` data source registered. Its JVM dies with this process; SIGTERM or
    SIGINT during the start ends it and raises :class:`jvm.Stopped`; end the session with
    :func:`jvm.stop`."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.driver.memory", "2g")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    spark = jvm.start(builder)
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaRanges)
    spark.dataSource.register(staging.StageSink)
    return spark


def prefix_root(path: str | Path, prefix: str) -> Path:
    """Where a capture's Delta tables go: ``<path>/<prefix>/<schema>/<table>`` (its offsets and
    staging beside them), so two captures' same-named tables never share one; directly under
    ``<path>`` for the empty prefix."""
    if not prefix:
        return Path(path)
    return Path(path) / (prefix if prefix not in (".", "..") else f"%{prefix}")


@dataclass
class BatchResult:
    messages: int = 0  # table-topic offsets read (compaction may have removed some)
    changes: int = 0  # changes written after the per-key dedupe
    truncates: int = 0
    dead_letters: int = 0
    capped: bool = False  # a partition had more than max_messages to read
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


class WarehouseJob:
    """Loads the table topics into Delta tables under ``path`` (see the module docstring), with
    ``writer`` (default: :func:`writer_for` the session); ``sink`` replaces the Delta tables
    (the core's behaviour tests run the job into the reference MemorySink)."""

    def __init__(self, spark: Any, path: str, *, bootstrap: Connection, registry: Registry,
                 prefix: str = "", topics: Iterable[str] | None = None,
                 on_poison: str = "dead-letter", max_messages: int = 1_000_000,
                 chunk: int = 200_000, name: str = "warehouse",
                 writer: DeltaWriter | None = None, sink: Sink | None = None):
        self.dead_letters = DeadLetters(on_poison, name=name, bootstrap=bootstrap,
                                        topic=with_prefix(prefix, DEAD_LETTER))
        self.spark = spark
        self.sink = sink if sink is not None else DeltaSink(prefix_root(path, prefix),
                                                            writer or writer_for(spark))
        self.bootstrap, self.registry = bootstrap, registry
        self.prefix = prefix
        self.topics = list(topics) if topics else None
        self.on_poison = self.dead_letters.policy
        self.max_messages, self.chunk = max_messages, chunk
        self.name = name
        self.truncate_topic = with_prefix(prefix, TRUNCATE)
        self.dead_letter_topic = self.dead_letters.topic
        # without --topic: the table topics the capture records as its own
        self._owned = OwnedTopics(bootstrap, prefix, name) if self.topics is None else None
        self._is_table_topic = self._owned or table_topics(prefix, self.topics)
        self.decoder = decoder(registry)
        self._consumer = Consumer({**client_config(bootstrap),
                                   "group.id": "bottler-warehouse-planner"})
        self._positions: dict[TopicPartition, int] = {}  # as flushed by this job
        self._connector: bool | None = None  # Spark's Kafka connector on the classpath

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
        self._consumer.close()
        self.dead_letters.close()
        self.sink.close()

    # -- running -------------------------------------------------------------------------

    def run_until_caught_up(self) -> BatchResult:
        """Batches until every partition reached the high watermark it had at the start: a
        warehouse load. Returns the totals."""
        marks = self._watermarks(self._partitions())
        # the broker restarting, or the capture's topic ownership not read to the end yet
        while marks is None or (self._owned is not None and not self._owned.complete):
            time.sleep(1.0)
            marks = self._watermarks(self._partitions())
        target = {tp: high for tp, (_, high) in marks.items()}
        total = BatchResult()
        while True:
            result = self.batch()
            for name in ("messages", "changes", "truncates", "dead_letters"):
                setattr(total, name, getattr(total, name) + getattr(result, name))
            total.offsets = result.offsets
            if all(result.offsets.get(tp, 0) >= high for tp, high in target.items()):
                return total

    def run(self, stop: threading.Event, interval: float = 1.0) -> None:
        """Micro-batches until ``stop`` is set; waits ``interval`` when there was nothing new."""
        while not stop.is_set():
            result = self.batch()
            if not result.messages and not result.truncates and not result.capped:
                stop.wait(interval)

    # -- one batch -----------------------------------------------------------------------

    def batch(self) -> BatchResult:
        started = time.monotonic()
        partitions = self._partitions()
        new = [tp for tp in partitions if tp not in self._positions]
        if new:  # at the start, and for topics created since: where their tables stand
            self._positions.update({tp: 0 for tp in new} | self.sink.stored_offsets(new))
        start = {tp: self._positions[tp] for tp in partitions}
        marks = self._watermarks(partitions)
        if marks is None:  # the broker restarting: nothing new this time
            return BatchResult(offsets=start)
        high = {tp: h for tp, (_, h) in marks.items()}
        for tp in positions.replayed(self.name, positions.lost_ends(start, high), start,
                                     self.truncate_topic):
            start[tp] = 0
        result = BatchResult()
        truncates, moved = self._truncates(start, high, result)
        high = {tp: h for tp, h in high.items() if tp[0] != self.truncate_topic}
        offsets = dict(moved)
        ranges = []
        for tp, h in high.items():
            begin = start.get(tp, 0)
            end = max(begin, h)
            if end - begin > self.max_messages:
                end, result.capped = begin + self.max_messages, True
            offsets[tp] = end
            result.messages += end - begin
            ranges += [[tp[0], tp[1], lo, min(lo + self.chunk, end)]
                       for lo in range(begin, end, self.chunk)]
        stage_dir = self._staging() if ranges else None
        try:
            if stage_dir is not None:  # the Delta tables: the executors stage, delta-rs streams
                staged = self._stage(ranges, stage_dir, result)
                changes, rows = [], staged.rows if staged else 0
            else:  # nothing to read, or a sink taking changes (the core's reference sink)
                staged, changes = None, self._read(ranges, result) if ranges else []
                rows = len(changes)
            moved_any = any(start.get(tp) != o for tp, o in offsets.items())
            if truncates or rows or moved_any:
                try:
                    applied = self._write(truncates + changes, offsets, staged)
                except BaseException:
                    self._positions.clear()  # where the tables stand is read again
                    raise
                self._positions.update(offsets)
                metrics.count_changes(self.name, applied)
                for table in (staged.tables.values() if staged else ()):
                    metrics.CHANGES.labels(self.name, "upsert").inc(table.source.upserts)
                    metrics.CHANGES.labels(self.name, "delete").inc(table.source.deletes)
                metrics.BATCHES.labels(self.name).inc()
        finally:
            if stage_dir is not None:
                shutil.rmtree(stage_dir, ignore_errors=True)
        changes_count = rows
        result.changes, result.truncates = changes_count, len(truncates)
        result.offsets = {**start, **offsets}
        for (topic, partition), h in high.items():
            metrics.LAG.labels(self.name, topic, str(partition)).set(
                max(0, h - result.offsets[(topic, partition)]))
        behind = any(h > result.offsets[tp] for tp, h in high.items())
        metrics.CAUGHT_UP.labels(self.name).set(0 if behind or result.capped else 1)
        if result.messages or truncates:
            took = time.monotonic() - started
            log.info("%s: %d messages (%.0f/s), %d changes after the per-key dedupe, %d truncates,"
                     " %d dead letters in %.1f s; offsets %s", self.name, result.messages,
                     result.messages / max(took, 1e-6), changes_count, len(truncates),
                     result.dead_letters, took,
                     ", ".join(f"{t}[{p}]={o}" for (t, p), o in sorted(offsets.items())))
        return result

    def _partitions(self) -> list[TopicPartition]:
        metadata = self._consumer.list_topics(timeout=10)
        if self._owned is not None:
            self._owned.refresh(metadata.topics)
        return sorted((topic, p) for topic, meta in metadata.topics.items()
                      if topic == self.truncate_topic or self._is_table_topic(topic)
                      for p in meta.partitions)

    def _watermarks(self, partitions: Iterable[TopicPartition]) -> watermarks.Watermarks | None:
        return watermarks.read(self._consumer, partitions, self.name)

    def _truncates(self, start: dict[TopicPartition, int], high: dict[TopicPartition, int],
                   result: BatchResult) -> tuple[list[Change], dict[TopicPartition, int]]:
        """The truncate changes of the control topic's new events (up to ``high``), and the
        positions they move (the control topic's included); ``start`` is moved to the
        barriers."""
        changes: list[Change] = []
        moved: dict[TopicPartition, int] = {}
        control = [tp for tp in start if tp[0] == self.truncate_topic]
        for tp in control:
            for msg in read_range(self.bootstrap, tp[0], tp[1], start[tp], high[tp]):
                try:
                    found = positions.barrier(self.decoder, msg, self._is_table_topic)
                except DecodeError as exc:
                    self.dead_letters.message(msg, str(exc), "DecodeError")
                    result.dead_letters += 1
                    continue
                if found is not None:
                    change, barrier = found
                    start.update(barrier)
                    moved.update(barrier)
                    changes.append(change)
            moved[tp] = max(high[tp], start[tp])
        return changes, moved

    def _deduplicated(self, ranges: list[list]) -> Any:
        """The ranges read and decoded (one Spark partition per range of a topic-partition),
        the last event of each key kept: a window over ``(topic, identity)``."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

        if self._connector is None:
            self._connector = kafka.available(self.spark)
        if self._connector:  # Spark's Kafka connector, where its jars are (the Docker image)
            frame = kafka.frame(self.spark, self.bootstrap, self.registry, ranges)
        else:
            frame = (self.spark.read.format(NAME).option("bootstrap", option_value(self.bootstrap))
                     .option("registry", option_value(self.registry))
                     .option("ranges", json.dumps(ranges)).load())
        last = Window.partitionBy("topic", "identity").orderBy(
            F.col("partition").desc(), F.col("offset").desc())
        return frame.withColumn("_rank", F.row_number().over(last)).where("_rank = 1") \
            .drop("_rank")

    def _read(self, ranges: list[list], result: BatchResult) -> list[Change]:
        """The deduplicated rows collected as changes: for a sink that takes changes only."""
        rows = self._deduplicated(ranges).collect()
        changes = []
        for row in sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"])):
            if row["op"] == "poison":
                at = row["topic"], row["partition"], row["offset"]
                self.dead_letters.at(*at, row["error"], "DecodeError",
                                     lambda at=at: self._content(*at))
                result.dead_letters += 1
                continue
            key, value = pickle.loads(row["payload"])  # noqa: S301 - our own executors'
            kschema = self._schema(row["key_schema_id"])
            vschema = self._schema(row["value_schema_id"])
            writer = vschema if vschema is not None else kschema
            if "pg.table" not in writer.schema:
                continue  # not a table topic (business events, say): passed over
            changes.append(Change(
                row["topic"], table_of(writer.schema), row["op"], key, value, row["partition"],
                row["offset"], kschema.id if kschema else None, vschema.id if vschema else None,
                kschema.schema if kschema else None, vschema.schema if vschema else None,
                None, row["timestamp"]))
        return changes

    def _schema(self, schema_id: int | None):
        return None if schema_id is None else self.decoder.schema(schema_id)

    def _staging(self) -> Path | None:
        """A fresh staging directory for this batch's rows, when the sink takes staged rows."""
        if not isinstance(self.sink, DeltaSink):
            return None
        path = self.sink.root / STAGING / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def _stage(self, ranges: list[list], directory: Path, result: BatchResult) -> staging.Batch:
        """Spark: read and decode the ranges, keep the last event per key, and stage the
        survivors as Parquet in ``directory`` (executors); the driver reads the footers."""
        self._deduplicated(ranges).write.format(staging.NAME).mode("append") \
            .option("dir", str(directory)).option("registry", option_value(self.registry)).save()
        staged = staging.read(directory, self.decoder)
        for p in sorted(staged.poison, key=lambda p: (p.topic, p.partition, p.offset)):
            at = p.topic, p.partition, p.offset
            self.dead_letters.at(*at, p.reason, p.error, lambda at=at: self._content(*at))
            result.dead_letters += 1
        return staged

    def _write(self, changes: list[Change], offsets: dict[TopicPartition, int],
               staged: staging.Batch | None = None) -> list[Change]:
        if staged is not None:
            self.sink.write(changes, offsets, staged.tables)
            self.dead_letters.flush()
            self.sink.flush()
            return changes
        return poison.apply(self.sink, changes, offsets, self.dead_letters,
                            lambda c: self._content(c.topic, c.partition, c.offset))

    def _content(self, topic: str, partition: int, offset: int) -> poison.Content:
        """The key and value of a message set aside, read back: the driver never had them."""
        msg = next(read_range(self.bootstrap, topic, partition, offset, offset + 1), None)
        return (msg.key(), msg.value()) if msg is not None else (None, None)
