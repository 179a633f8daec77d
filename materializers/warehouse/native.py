"""The warehouse as Spark users write it (``--route spark``, issue 27): Spark's Kafka source,
``from_avro`` on the bytes after Confluent's 5-byte header, the last change per key, and
delta-spark's ``DeltaTable.merge``. No Python worker and no row on the driver: the rows go from
the Kafka source through the JVM into Delta.

Per micro-batch (``foreachBatch``; ``trigger(availableNow=True)`` for ``--once``, a processing
time trigger for the continuous job):

1. the truncate control topic's new events (a handful, read on the driver): each names a table
   topic and its barrier, the offset per partition before which its messages are void;
2. for each table topic that moved or was truncated, decode (spark_avro.py): the value with the
   writer schema of its schema id (every version registered under the topic's subject), read as
   the topic's latest schema, so older rows take the newest columns, their Avro defaults, or the
   default a column was added with; a tombstone is a delete, its key decoded alone. After a
   truncate only the rows from its barrier on count; those before the stream's position (the
   truncate read after them) are read again with a batch read of Spark's Kafka source;
3. the commits (spark_merge.py): per topic-partition, the last change per key merged (a
   ``max_by`` hash aggregate, then ``DeltaTable.merge``), or the table's first rows appended, or
   an unkeyed table's rows appended; after a truncate the first of them overwrites the table.
   A topic's batch of fewer than ``driver_merge_below`` messages is one commit by delta-rs on
   the driver instead, its last change per key collected as Arrow (a MERGE's dozen Spark jobs
   are most of a small batch's time).
   Each commit records its topic-partition's next offset as its Delta transaction identifier
   (``txnAppId``/``txnVersion``), so a replayed batch commits nothing twice. A table with no
   change in the batch gets no commit. Topics are committed one after another: two at a time,
   in threads, crashed the job once in Spark's analyser (docs/warehouse.md);
4. the truncate topic's offsets, in the warehouse's offsets table (sink.py), last.

Delta stays the truth: the query starts from the offsets the tables recorded (read before it
starts, ``startingOffsets``); its checkpoint is a scratch directory of the run.

**Over Spark Connect** (``--spark-remote``, connect.py) there is no ``foreachBatch`` to run the
batches here (its function would run in a Python process of the server's), so this process drives
them itself (:meth:`SparkRoute._drive`): each batch a batch read of the same Kafka source, from
where each partition stands to its high watermark (at most ``max_messages`` offsets), the same
batch function; ``--once`` up to the watermarks it found first, the continuous job every interval.
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
from materializers.core import watermarks
from materializers.core.changes import TopicPartition
from materializers.core.decode import DecodeError, truncate_event
from materializers.core.ownership import OwnedTopics
from materializers.core.poison import DeadLetters
from materializers.warehouse import connect, kafka, stream
from materializers.warehouse.batch import DELETE
from materializers.warehouse.delta import open_table, stored_offsets
from materializers.warehouse.sink import DeltaSink, table_path
from materializers.warehouse.source import decoder
from materializers.warehouse.spark_avro import (
    decoded,
    missing_struct,
    rows,
    topic_schemas,
    undecoded,
)
from materializers.warehouse.spark_merge import TopicWrite
from schemas.topics import DEAD_LETTER, TRUNCATE, table_topics, with_prefix

log = logging.getLogger(__name__)

ROUTES = ("python", "spark")  # --route: today's default, and this module
# offsets a Spark task reads at most: a batch of --max-messages in tasks whose cached share
# and spills stay bounded
TASK_RECORDS = 1_000_000
STOP_TIMEOUT = 10.0  # seconds a stopped query has for its batch (commits are atomic)
# the query's scratch checkpoint, named with the job's pid (upkeep.py removes a dead run's)
CHECKPOINT_PREFIX = "bottler-warehouse-checkpoint-"


# -- the job ------------------------------------------------------------------------------


@dataclass
class RouteResult:
    messages: int = 0
    changes: int = 0
    truncates: int = 0
    dead_letters: int = 0
    commits: int = 0
    offsets: dict[TopicPartition, int] = field(default_factory=dict)

    def add(self, other: RouteResult) -> None:
        """``other`` counted in: a topic's into its batch's, a batch's into the run's."""
        self.messages += other.messages
        self.changes += other.changes
        self.truncates += other.truncates
        self.dead_letters += other.dead_letters
        self.commits += other.commits
        self.offsets.update(other.offsets)


class SparkRoute:
    """Loads the table topics into Delta tables under ``root`` (the job's prefix_root) with
    Spark's Kafka source, ``from_avro`` and delta-spark (the module docstring); a topic's
    batch of fewer than ``driver_merge_below`` messages merged by delta-rs on the driver (0:
    none; the CLI's ``--driver-merge-below`` defaults to more)."""

    def __init__(self, spark: Any, root: Path, *, bootstrap: Connection, registry: Registry,
                 prefix: str = "", topics: Iterable[str] | None = None,
                 on_poison: str = "dead-letter", max_messages: int = 5_000_000,
                 name: str = "warehouse", owned: OwnedTopics | None = None,
                 driver_merge_below: int = 0):
        self.spark, self.root = spark, Path(root)
        self.bootstrap, self.registry = bootstrap, registry
        self.client = registry_client(registry)
        self.decoder = decoder(registry)  # the truncate events'
        self.prefix, self.name = prefix, name
        self.topics = list(topics) if topics else None
        self.max_messages, self.driver_merge_below = max_messages, driver_merge_below
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
        if connect.remote(self.spark):
            return self._drive()
        return self._stream({"availableNow": True})

    def run(self, stop: threading.Event, interval: float) -> RouteResult:
        if connect.remote(self.spark):
            return self._drive(stop, interval)
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
                positions.update(result.offsets)  # a truncate's barrier past the batch's end
            except BottlerError as exc:  # one line, not Spark's stack traces
                failure.append(exc)
                return
            total.add(result)

        reader = self._kafka(self.spark.readStream, starting)
        query = (reader.option("maxOffsetsPerTrigger", str(self.max_messages * len(partitions)))
                 .option("minPartitions", str(connect.parallelism(self.spark)))
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

    def _drive(self, stop: threading.Event | None = None, interval: float = 0.0
               ) -> RouteResult:
        """The batches over Spark Connect (the module docstring): until caught up with the
        watermarks found at the start (``stop`` None), or until ``stop``, a batch every
        ``interval`` seconds (at once after one that was capped or took longer)."""
        total = RouteResult()
        marks = watermarks.Reader(self.bootstrap)
        positions: dict[TopicPartition, int] = {}  # where each partition stands
        targets: dict[TopicPartition, int] | None = None  # --once: the first watermarks
        while True:
            started = time.monotonic()
            partitions = self._partitions()
            new = [tp for tp in partitions if tp not in positions]
            positions.update({tp: 0 for tp in new} | self.sink.stored_offsets(new))
            found = watermarks.read(marks, partitions, self.name) if partitions else {}
            high = None if found is None else {tp: h for tp, (_, h) in found.items()}
            if high is not None and stop is None and targets is None:
                targets = high
            if high is not None:
                upto = high if targets is None else {tp: min(h, targets.get(tp, h))
                                                     for tp, h in high.items()}
                ends = {tp: min(h, positions[tp] + self.max_messages) for tp, h in upto.items()}
                ranges = {tp: (positions[tp], e) for tp, e in ends.items() if e > positions[tp]}
                if ranges:
                    result = self.batch(self._read(ranges, split=True), ends, dict(positions))
                    positions.update({tp: e for tp, e in ends.items() if e > positions[tp]})
                    positions.update(result.offsets)
                    total.add(result)
                if stop is None and all(positions[tp] >= e for tp, e in upto.items()):
                    return total
                if any(e < upto[tp] for tp, e in ends.items()):
                    continue  # capped by max_messages: the rest at once
            if stop is None:
                time.sleep(1.0)  # the broker restarting: the load waits for it
            elif stop.wait(max(0.0, interval - (time.monotonic() - started))):
                return total

    # -- one batch ------------------------------------------------------------------------

    def batch(self, frame: Any, ends: dict[TopicPartition, int],
              begins: dict[TopicPartition, int]) -> RouteResult:
        """One micro-batch of Spark's Kafka rows, up to ``ends`` (the source's offsets, from
        the query's offset log), each partition from ``begins`` (where its table stands: rows
        before it are passed over): the truncate events first (each moves its topic to its
        barrier), then each table topic that moved or was truncated, then the truncate topic's
        offsets (made last: a truncate applied again after a crash is harmless)."""
        from pyspark.sql import functions as F  # noqa: N812

        started = time.monotonic()
        result = RouteResult()
        moved = {tp: end for tp, end in ends.items() if end > begins.get(tp, 0)}
        control = {tp: end for tp, end in moved.items() if tp[0] == self.truncate_topic}
        barriers = self._barriers(frame, control, begins, result) if control else {}
        for topic in sorted({t for t, _ in moved if t != self.truncate_topic} | set(barriers)):
            barrier = barriers.get(topic, {})
            parts = {tp for tp in moved if tp[0] == topic} | set(barrier)
            starts = {tp: max(begins.get(tp, 0), barrier.get(tp, 0)) for tp in parts}
            count = sum(end - begins.get(tp, 0) for tp, end in moved.items() if tp[0] == topic)
            result.messages += count
            rows = frame.where((F.col("topic") == topic) & _from(starts))
            # a truncate read after its topic's later rows: those applied again, after it
            again = {tp: (b, begins[tp]) for tp, b in barrier.items() if b < begins.get(tp, 0)}
            if again:
                rows = rows.unionByName(self._read(again))
            targets = {tp: max(starts[tp], ends.get(tp, 0)) for tp in parts}
            result.add(self._topic(rows, topic, targets, bool(barrier), count))
        if control:
            result.messages += sum(end - begins.get(tp, 0) for tp, end in control.items())
            self.sink._store_elsewhere(control)
            result.offsets.update(control)
        if result.messages:
            log.info("%s: %d messages (%.0f/s), %d truncates, %d commits in %.1f s", self.name,
                     result.messages, result.messages / max(time.monotonic() - started, 1e-6),
                     result.truncates, result.commits, time.monotonic() - started)
        return result

    def _barriers(self, frame: Any, control: dict[TopicPartition, int],
                  begins: dict[TopicPartition, int], result: RouteResult
                  ) -> dict[str, dict[TopicPartition, int]]:
        """The barriers of the batch's truncate events (a handful, read on the driver), per
        table topic: the last event's of each (barriers only move forward)."""
        from pyspark.sql import functions as F  # noqa: N812

        events = (frame.where(F.col("topic") == self.truncate_topic)
                  .select("partition", "offset", "key", "value").collect())
        barriers: dict[str, dict[TopicPartition, int]] = {}
        for row in sorted(events, key=lambda r: (r["partition"], r["offset"])):
            tp = (self.truncate_topic, row["partition"])
            if tp not in control or row["offset"] < begins.get(tp, 0):
                continue
            value = bytes(row["value"]) if row["value"] is not None else None
            try:
                topic, _, barrier = truncate_event(self.decoder, value)
            except DecodeError as exc:
                self.dead_letters.at(tp[0], tp[1], row["offset"], str(exc), "DecodeError",
                                     (row["key"], row["value"]))
                result.dead_letters += 1
                continue
            if self._is_table_topic(topic):
                barriers[topic] = {(topic, p): o for p, o in barrier.items()}
                result.truncates += 1
        if result.dead_letters:
            self.dead_letters.flush()
        return barriers

    def _read(self, ranges: dict[TopicPartition, tuple[int, int]], split: bool = False) -> Any:
        """The Kafka rows of ``ranges`` (``tp -> (from, to)``), a batch read of Spark's Kafka
        source: the rows a truncate's replay needs from before the stream's position, or over
        Connect a batch's (``split``: in as many Spark partitions as the session's cores)."""
        reader = self._range_reader(ranges)
        cores = connect.parallelism(self.spark) if split else None
        return (reader.option("minPartitions", str(cores)) if cores else reader).load()

    def _range_reader(self, ranges: dict[TopicPartition, tuple[int, int]]) -> Any:
        """The batch reader of :meth:`_read`, not yet loaded."""
        start: dict[str, dict[str, int]] = {}
        end: dict[str, dict[str, int]] = {}
        for (topic, partition), (lo, hi) in ranges.items():
            start.setdefault(topic, {})[str(partition)] = lo
            end.setdefault(topic, {})[str(partition)] = hi
        return self._kafka(self.spark.read, start).option("endingOffsets", json.dumps(end))

    def _kafka(self, reader: Any, starting: dict[str, dict[str, int]]) -> Any:
        """``reader`` (``spark.read`` or ``spark.readStream``) as Spark's Kafka source of the
        partitions of ``starting`` (topic -> partition -> first offset), the options the
        stream and the batch reads share: the client's properties, tasks of at most
        ``TASK_RECORDS`` offsets, and gaps allowed (compaction leaves them)."""
        reader = reader.format("kafka")
        for name, value in kafka.java_properties(self.bootstrap).items():
            reader = reader.option(name, value)
        return (reader.option("assign", json.dumps({t: sorted(int(p) for p in ps)
                                                    for t, ps in starting.items()}))
                .option("startingOffsets", json.dumps(starting))
                .option("maxRecordsPerPartition", str(TASK_RECORDS))
                .option("failOnDataLoss", "false"))

    def _topic(self, frame: Any, topic: str, targets: dict[TopicPartition, int],
               truncated: bool, messages: int) -> RouteResult:
        """The ``messages`` rows of ``topic`` decoded, its poison set aside, the rest committed:
        one commit per partition of ``targets`` (spark_merge.py), or, under
        ``driver_merge_below`` messages, one on the driver."""
        from pyspark.sql import functions as F  # noqa: N812

        result = RouteResult()
        schemas = topic_schemas(self.client, topic)
        if schemas is None:
            return result
        path = table_path(self.root, schemas.table)
        result.offsets.update(targets)
        table = open_table(path) if not truncated else None
        if table is not None:  # partitions the table records as done: a replay, nothing to do
            done = stored_offsets(table, targets)
            targets = {tp: o for tp, o in targets.items() if done.get(tp, -1) < o}
            if not targets:
                return result
        columns, unfit = rows(schemas.latest, "v")
        missing = missing_struct(schemas)
        key = (decoded("key", schemas.keys, schemas.latest_key) if schemas.latest_key is not None
               else F.lit(None))
        frame = frame.select("partition", "offset", "key", "value",
                             decoded("value", schemas.values, schemas.latest, missing).alias("v"),
                             key.alias("k"))
        poison = F.col("value").isNotNull() & (F.col("v").isNull()
                                               | undecoded(schemas, "v"))
        if unfit is not None:
            poison = poison | (F.col("v").isNotNull() & unfit)
        frame = frame.select(
            "partition", "offset", "v", "k", F.col("value").isNull().alias(DELETE),
            poison.alias("_poison"), *(F.when(poison, F.col(c)).alias(c) for c in ("key", "value"))
        )
        self.sink._check_own(path, schemas.table, targets)
        write = TopicWrite(self.spark, path, schemas, columns, missing)
        if messages < self.driver_merge_below:  # the commit on the driver
            changes, poisoned = write.collect(frame)
            self._dead_letters(poisoned.to_pylist(), topic, result)
            if not write.on_driver(changes, targets, truncated):
                self.sink._store_elsewhere(targets)  # deletes alone, and no table to hold them
        else:
            # decoded once and cached: the poison rows are looked for in what the commits then
            # read; the message's bytes are kept for the poison rows alone (their dead letters)
            frame = frame.persist()
            try:
                self._dead_letters(frame.where("_poison").select(
                    "partition", "offset", "key", "value").collect(), topic, result)
                write.write(frame.where("NOT _poison"), targets, truncated, messages)
            finally:
                frame.unpersist()
        result.changes += write.changes
        result.commits += write.commits
        return result

    def _dead_letters(self, poison: Iterable[Any], topic: str, result: RouteResult) -> None:
        """Messages that do not decode, or whose values Delta cannot hold (a handful, each with
        its ``partition``, ``offset``, ``key`` and ``value``), set aside under the poison
        policy."""
        for row in poison:
            self.dead_letters.at(topic, row["partition"], row["offset"],
                                 "does not decode with its schema id's writer schema, or holds "
                                 "a value Delta cannot", "DecodeError",
                                 (row["key"], row["value"]))
            result.dead_letters += 1
        if result.dead_letters:
            self.dead_letters.flush()


def _from(starts: dict[TopicPartition, int]) -> Any:
    """The rows at or after their partition's start."""
    from pyspark.sql import functions as F  # noqa: N812

    cond = None
    for (_, partition), start in starts.items():
        c = (F.col("partition") == partition) & (F.col("offset") >= start)
        cond = c if cond is None else cond | c
    return cond if cond is not None else F.lit(False)
