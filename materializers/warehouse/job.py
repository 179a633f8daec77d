"""The warehouse load: a PySpark job merging the table topics into Delta tables.

Per micro-batch, on the driver:

1. the table topics (``--topic``, or every topic under the prefix) and their partitions; where
   each starts: the offsets the Delta tables recorded (:meth:`DeltaSink.stored_offsets`);
2. the truncate control topic's new events, read here (a handful): each moves its table
   topic's partitions to the truncate's barrier (messages before it are void; a partition
   already past it is read again from there, after the truncate);
3. the offset ranges up to the high watermarks (at most ``max_messages`` per partition), cut
   into Spark partitions of ``chunk`` offsets;

then Spark reads and decodes the ranges in parallel (source.py) and keeps the last event per
key by (partition, offset) — a window over the key; the driver turns the survivors into
:class:`~materializers.core.Change`\\ s and hands them, after the batch's truncates, to the
:class:`DeltaSink` with the offsets the ranges end at: one Delta commit per table, its offsets in
it (sink.py). So the MERGE, the truncates and the offsets have one implementation, shared with
the consumer loop's path.

Poison messages (undecodable, or refused by the sink) go to ``<prefix>._bottler.dead-letter``
with the consumer loop's headers, or stop the job (``on_poison="stop"``).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from common.errors import BottlerError
from common.kafka import Connection, client_config
from common.registry import Registry
from materializers.core import dead_letters, metrics
from materializers.core.changes import Change, TopicPartition, table_of
from materializers.core.decode import DecodeError, truncate_event
from materializers.core.loop import PoisonMessage
from materializers.core.sink import RejectedChange
from materializers.warehouse.delta import DeltaWriter, writer_for
from materializers.warehouse.sink import DeltaSink
from materializers.warehouse.source import NAME, KafkaRanges, decoder, option_value, read_range
from schemas.topics import DEAD_LETTER, TRUNCATE, table_topics, with_prefix

log = logging.getLogger(__name__)


def spark_session(master: str = "local[2]", app: str = "bottler-warehouse"):
    """A Spark session whose Python workers run this interpreter (so they import bottler), with
    the ``bottler_kafka`` data source registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master(master).appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.memory", "2g")
             .config("spark.sql.execution.arrow.pyspark.enabled", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KafkaRanges)
    return spark


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
    ``writer`` (default: :func:`writer_for` the session)."""

    def __init__(self, spark: Any, path: str, *, bootstrap: Connection, registry: Registry,
                 prefix: str = "", topics: Iterable[str] | None = None,
                 on_poison: str = "dead-letter", max_messages: int = 1_000_000,
                 chunk: int = 200_000, name: str = "warehouse",
                 writer: DeltaWriter | None = None):
        if on_poison not in ("dead-letter", "stop"):
            raise BottlerError(f"on_poison must be dead-letter or stop, not {on_poison!r}")
        self.spark = spark
        self.sink = DeltaSink(path, writer or writer_for(spark))
        self.bootstrap, self.registry = bootstrap, registry
        self.prefix = prefix
        self.topics = list(topics) if topics else None
        self.on_poison = on_poison
        self.max_messages, self.chunk = max_messages, chunk
        self.name = name
        self.truncate_topic = with_prefix(prefix, TRUNCATE)
        self.dead_letter_topic = with_prefix(prefix, DEAD_LETTER)
        self._is_table_topic = table_topics(prefix, self.topics)
        self.decoder = decoder(registry)
        self._consumer = Consumer({**client_config(bootstrap),
                                   "group.id": "bottler-warehouse-planner"})
        self._producer: Producer | None = None
        self._positions: dict[TopicPartition, int] = {}  # as flushed by this job

    def close(self) -> None:
        self._consumer.close()
        if self._producer is not None:
            self._producer.flush(30)
        self.sink.close()

    # -- running -------------------------------------------------------------------------

    def run_until_caught_up(self) -> BatchResult:
        """Batches until every partition reached the high watermark it had at the start: a
        warehouse load. Returns the totals."""
        target = self._watermarks(self._partitions())
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
        high = self._watermarks(partitions)
        self._replay_lost_ends(start, high)
        result = BatchResult()
        truncates, moved = self._truncates(start, result)
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
        changes = self._read(ranges, result) if ranges else []
        moved_any = any(start.get(tp) != o for tp, o in offsets.items())
        if truncates or changes or moved_any:
            try:
                self._write(truncates + changes, offsets)
            except BaseException:
                self._positions.clear()  # where the tables stand is read again
                raise
            self._positions.update(offsets)
            metrics.count_changes(self.name, truncates + changes)
        result.changes, result.truncates = len(changes), len(truncates)
        result.offsets = {**start, **offsets}
        for (topic, partition), h in high.items():
            metrics.LAG.labels(self.name, topic, str(partition)).set(
                max(0, h - result.offsets[(topic, partition)]))
        behind = any(h > result.offsets[tp] for tp, h in high.items())
        metrics.CAUGHT_UP.labels(self.name).set(0 if behind or result.capped else 1)
        if result.messages or truncates:
            log.info("%s: %d messages, %d changes after the per-key dedupe, %d truncates,"
                     " %d dead letters in %.1f s", self.name, result.messages, len(changes),
                     len(truncates), result.dead_letters, time.monotonic() - started)
        return result

    def _replay_lost_ends(self, start: dict[TopicPartition, int],
                          high: dict[TopicPartition, int]) -> None:
        """A partition whose log now ends before our position lost its end in the broker (a
        restart from an older save, an unclean leader election), and its offsets may hold
        other messages than the ones applied: it is replayed from the start, and the truncate
        events with it (as the consumer loop does, see Materializer._replay_lost)."""
        lost = [tp for tp, h in high.items() if 0 <= h < start[tp]]
        if not lost:
            return
        log.warning("%s: %s no longer reach our positions (the broker lost messages): replaying"
                    " them and the truncate events from the start", self.name,
                    ", ".join(f"{t}[{p}]" for t, p in lost))
        for tp in start:
            if tp in lost or tp[0] == self.truncate_topic:
                start[tp] = 0

    def _partitions(self) -> list[TopicPartition]:
        metadata = self._consumer.list_topics(timeout=10)
        return sorted((topic, p) for topic, meta in metadata.topics.items()
                      if topic == self.truncate_topic or self._is_table_topic(topic)
                      for p in meta.partitions)

    def _watermarks(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: self._consumer.get_watermark_offsets(
                    KafkaTopicPartition(*tp), timeout=10, cached=False)[1]
                for tp in partitions}

    def _truncates(self, start: dict[TopicPartition, int],
                   result: BatchResult) -> tuple[list[Change], dict[TopicPartition, int]]:
        """The truncate changes of the control topic's new events, and the positions they move
        (the control topic's included); ``start`` is moved to the barriers."""
        changes: list[Change] = []
        moved: dict[TopicPartition, int] = {}
        control = [tp for tp in start if tp[0] == self.truncate_topic]
        for tp, high in self._watermarks(control).items():
            for msg in read_range(self.bootstrap, tp[0], tp[1], start[tp], high):
                try:
                    topic, table, barrier = truncate_event(self.decoder, msg.value())
                except DecodeError as exc:
                    self._poison(msg.topic(), msg.partition(), msg.offset(), msg.key(),
                                 msg.value(), str(exc), "DecodeError")
                    result.dead_letters += 1
                    continue
                if not self._is_table_topic(topic):
                    continue
                for partition, offset in barrier.items():
                    start[(topic, partition)] = moved[(topic, partition)] = offset
                changes.append(Change(topic=topic, table=table, op="truncate", key=None,
                                      value=None, partition=msg.partition(),
                                      offset=msg.offset(), barrier=barrier,
                                      timestamp=msg.timestamp()[1]))
            moved[tp] = max(high, start[tp])
        return changes, moved

    def _read(self, ranges: list[list], result: BatchResult) -> list[Change]:
        """Spark: read and decode the ranges, keep the last event per key."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

        frame = (self.spark.read.format(NAME).option("bootstrap", option_value(self.bootstrap))
                 .option("registry", option_value(self.registry))
                 .option("ranges", json.dumps(ranges))
                 .load())
        last = Window.partitionBy("topic", "identity").orderBy(
            F.col("partition").desc(), F.col("offset").desc())
        rows = (frame.withColumn("_rank", F.row_number().over(last))
                .where("_rank = 1").drop("_rank").collect())
        changes = []
        for row in sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"])):
            if row["op"] == "poison":
                self._poison_at(row["topic"], row["partition"], row["offset"], row["error"],
                                "DecodeError")
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

    def _write(self, changes: list[Change], offsets: dict[TopicPartition, int]) -> None:
        remaining = list(changes)
        while True:
            try:
                self.sink.write(remaining, offsets)
                break
            except RejectedChange as exc:
                c = exc.change
                self._poison_at(c.topic, c.partition, c.offset, exc.reason, "RejectedChange")
                remaining = [x for x in remaining if x is not c]
        if self._producer is not None and self._producer.flush(30) > 0:
            raise BottlerError(f"cannot write to {self.dead_letter_topic}",
                               "check the broker; the batch is replayed on restart")
        self.sink.flush()

    # -- poison messages -----------------------------------------------------------------

    def _poison_at(self, topic: str, partition: int, offset: int, reason: str,
                   error: str) -> None:
        if self.on_poison == "stop":
            raise PoisonMessage(topic, partition, offset, reason)
        msg = next(read_range(self.bootstrap, topic, partition, offset, offset + 1), None)
        key, value = (msg.key(), msg.value()) if msg is not None else (None, None)
        self._poison(topic, partition, offset, key, value, reason, error)

    def _poison(self, topic: str, partition: int, offset: int, key: bytes | None,
                value: bytes | None, reason: str, error: str) -> None:
        """The message to the dead-letter topic, with the consumer loop's headers."""
        if self.on_poison == "stop":
            raise PoisonMessage(topic, partition, offset, reason)
        metrics.DEAD_LETTERS.labels(self.name, topic).inc()
        log.warning("%s: %s[%d]@%d to %s: %s", self.name, topic, partition, offset,
                    self.dead_letter_topic, reason)
        if self._producer is None:
            self._producer = dead_letters.producer(self.bootstrap, self.dead_letter_topic)
        headers = dead_letters.headers(topic, partition, offset, reason, error, self.name)
        self._producer.produce(self.dead_letter_topic, key=key, value=value, headers=headers)
