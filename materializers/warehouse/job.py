"""The warehouse load: a PySpark job merging the table topics into Delta tables.

The micro-batches are a Structured Streaming query (stream.py): ``--once`` with
``trigger(availableNow=True)``, the continuous job with a processing-time trigger; its source
gives each batch's end offsets (a trigger with nothing new runs no batch, no Spark job) and
``foreachBatch`` runs :meth:`WarehouseJob.batch` up to them. Per micro-batch, on the driver:

1. the table topics (``--topic``, or those the capture of the prefix owns: core/ownership.py)
   and their partitions; where
   each starts: the offsets the Delta tables recorded (:meth:`DeltaSink.stored_offsets`);
2. the truncate control topic's new events, read here (a handful): each moves its table
   topic's partitions to the truncate's barrier, and a partition whose log lost its end is
   read again from the start (both as the consumer loop does: materializers/core/positions.py);
3. the offset ranges up to the batch's end offsets, cut into Spark partitions of ``chunk``
   offsets;

then Spark reads and decodes the ranges in parallel and keeps the last event per key (ranges.py);
the executors stage the survivors as Parquet (staging.py), and the driver hands each table's
files, read as a stream, after the batch's truncates, to the :class:`DeltaSink` with the offsets
the ranges end at: one Delta commit per table, its offsets in it (sink.py). No row passes through
the driver's Python heap. So the MERGE, the truncates and the offsets have one implementation,
shared with the consumer loop's path.

**What it shares with the consumer loops, and what not.** From the core it takes the topic
discovery and ownership (core/ownership.py ``discover``), the truncate barriers and the replay of
a lost log end (core/positions.py), the watermark reads, a broker restart being a pause
(core/watermarks.py), and the poison policy (core/poison.py). It does not run the consumer
skeleton (core/consumer.py): no consumer reads its table topics (Spark's executors read offset
ranges, or Spark's Kafka source does on ``--route spark``, native.py), so there is no assignment
to follow, no rebalance to void a batch, no refetch; Spark's streaming query decides when a batch
runs (its trigger is the idle behaviour), and a batch's positions are where the Delta tables
stand (their commits record the offsets: the write and the commit are one), moved by the batch's
own plan rather than by seeking a consumer.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from common.errors import BottlerError
from common.kafka import Connection, reader_config
from common.registry_client import Registry
from materializers.core import metrics, poison, positions, watermarks
from materializers.core.changes import Change, TopicPartition
from materializers.core.decode import DecodeError
from materializers.core.ownership import OwnedTopics, discover, discover_or_none
from materializers.core.poison import DeadLetters
from materializers.core.sink import Sink
from materializers.warehouse import jvm, staging, stream
from materializers.warehouse.delta import DeltaWriter, writer_for
from materializers.warehouse.ranges import RangeReading
from materializers.warehouse.sink import DeltaSink
from materializers.warehouse.source import KafkaRanges, decoder, option_value, read_range
from schemas.topics import DEAD_LETTER, TRUNCATE, table_topics, with_prefix

log = logging.getLogger(__name__)

# The driver's JVM (executors too, in local mode) starts in about half the time with C1 only
# and the serial collector; its own work is small (the Python workers decode and stage).
JVM_OPTIONS = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Xshare:auto"
# The spark route (native.py) decodes and merges in the JVM. Running for good, it wants the
# optimising compiler (C2); for one load (--once) C1 alone costs less: on the 1,050,000-row
# topic, C2's compiler threads took 23.6 CPU s of the run's 58 and saved 8.4 s of the tasks'
# (docs/warehouse.md, Performance).
JVM_OPTIONS_SPARK = "-XX:+UseParallelGC -Xshare:auto"
JVM_OPTIONS_SPARK_ONCE = JVM_OPTIONS_SPARK + " -XX:TieredStopAtLevel=1"
STOP_TIMEOUT = "10000"  # ms a stopped query waits for its batch (atomic commits, or replayed)
DRIVER_HOST = "127.0.0.1"  # where the driver listens unless --driver-host says otherwise
# The spark route's session settings (native.py), here and under spark-submit (submit.py)
SPARK_ROUTE_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Delta's log replay: 50 partitions by default, each a task
    "spark.databricks.delta.snapshotPartitions": "2",
    # The generated classes Spark keeps compiled (100 by default): a batch's MERGEs of four
    # tables need more, and every class evicted is compiled again (Janino) at the next batch,
    # in the tasks: with 2,000, a trigger's task CPU on the demo shop fell from 1.7-2.1 s to
    # 0.9-1.0 s (docs/warehouse.md, "The spark route's Spark jobs")
    "spark.sql.codegen.cache.maxEntries": "2000",
    # Parquet's own microsecond timestamps, as delta-rs writes them: Spark's default INT96
    # reads back (delta-rs, DuckDB) as nanoseconds, whose range stops at the years 1677 and 2262
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    # timestamps without time zone read and written as they are (native.py)
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.stopTimeout": STOP_TIMEOUT,
}
# The spark route runs no Python worker, yet at a session's first `format(...)` Spark 4.2 starts
# one to look up Python data sources (an interpreter importing pyspark: 1-2 CPU s) whenever its
# JVM finds a Python to run: PYSPARK_DRIVER_PYTHON, else PYSPARK_PYTHON, else python3 (no setting
# turns it off). The route's JVM is told of a Python no shell finds (docs/warehouse.md).
NO_PYTHON = {"PYSPARK_DRIVER_PYTHON": "bottler-spark-route-runs-no-python"}
STAGING = "_bottler_staging"  # under the warehouse: each batch's staged rows, removed after it


def spark_session(master: str = "local[2]", app: str = "bottler-warehouse",
                  driver_host: str = DRIVER_HOST, route: str = "python", once: bool = False,
                  dump: Path | None = None, conf: dict[str, str] | None = None):
    """A Spark session whose Python workers run this interpreter (so they import bottler), with
    the ``bottler_kafka`` data source registered (the python route's). Its JVM dies with this
    process; SIGTERM or SIGINT during the start ends it and raises :class:`jvm.Stopped`; end
    the session with :func:`jvm.stop`. The driver's RPC and block manager (unauthenticated)
    listen on ``driver_host`` only: loopback unless asked (executors elsewhere need an address
    they reach); Spark's own default is the machine's network address. ``route="spark"``
    (native.py) adds the jars of Spark's Kafka source, spark-avro and delta-spark (jars.py),
    Delta's SQL extension and the class-data archive (cds.py; ``dump``: where the JVM writes
    one as it exits, instead); ``once``: a single load, whose JVM compiles with C1 alone;
    ``conf``: settings of the caller's (connect.py's server)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # the address Spark takes for this machine's (its other parts, its log): the driver's too
    os.environ.setdefault("SPARK_LOCAL_IP", driver_host)
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master(master).appName(app)
               .config("spark.driver.host", driver_host)
               .config("spark.driver.bindAddress", driver_host)
               .config("spark.ui.enabled", "false")  # a web UI nobody here looks at: no port
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.driver.memory", "2g")
               .config("spark.driver.extraJavaOptions", JVM_OPTIONS)
               .config("spark.sql.streaming.stopTimeout", STOP_TIMEOUT)
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    if route == "spark":
        from materializers.warehouse import cds
        from materializers.warehouse.jars import spark_jars

        jars = spark_jars()
        archive = (f"-XX:ArchiveClassesAtExit={dump} {cds.QUIET}" if dump is not None
                   else cds.java_options(jars))
        options = JVM_OPTIONS_SPARK_ONCE if once else JVM_OPTIONS_SPARK
        builder = (builder.config("spark.jars", ",".join(jars))
                   .config("spark.driver.extraJavaOptions", f"{options} {archive}".strip()))
        for name, value in SPARK_ROUTE_CONF.items():
            builder = builder.config(name, value)
    for name, value in (conf or {}).items():
        builder = builder.config(name, value)
    spark = jvm.start(builder, env=NO_PYTHON if route == "spark" else None)
    spark.sparkContext.setLogLevel("ERROR")
    if route != "spark":  # the python route's data sources
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
    unknown: bool = False  # the watermarks could not be read (the broker restarting)
    offsets: dict[TopicPartition, int] = field(default_factory=dict)


class WarehouseJob:
    """Loads the table topics into Delta tables under ``path`` (see the module docstring), with
    ``writer`` (default: :func:`writer_for` the session); ``sink`` replaces the Delta tables
    (the core's behaviour tests run the job into the reference MemorySink); ``owned``: the
    reader of the capture's topic ownership, when the caller has one already (preflight.py)."""

    def __init__(self, spark: Any, path: str, *, bootstrap: Connection, registry: Registry,
                 prefix: str = "", topics: Iterable[str] | None = None,
                 on_poison: str = "dead-letter", max_messages: int = 1_000_000,
                 chunk: int = 200_000, name: str = "warehouse",
                 writer: DeltaWriter | None = None, sink: Sink | None = None,
                 owned: OwnedTopics | None = None):
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
        self._owned = owned or (OwnedTopics(bootstrap, prefix, name) if self.topics is None
                                else None)
        self._is_table_topic = self._owned or table_topics(prefix, self.topics)
        self.decoder = decoder(registry)
        self._consumer = Consumer(reader_config(bootstrap, "warehouse-planner"))
        self._marks = watermarks.Reader(bootstrap)
        self._positions: dict[TopicPartition, int] = {}  # as flushed by this job
        self._reader = RangeReading(spark, bootstrap, registry, self.decoder, self.dead_letters)

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
        self._consumer.close()
        self.dead_letters.close()
        self.sink.close()

    # -- running -------------------------------------------------------------------------

    def run_until_caught_up(self) -> BatchResult:
        """Batches until every partition reached the high watermark it had at the start: a
        warehouse load, a Structured Streaming query with ``trigger(availableNow=True)``.
        Returns the totals."""
        return self._stream({"availableNow": True})

    def run(self, stop: threading.Event, interval: float = 1.0) -> BatchResult:
        """Micro-batches until ``stop`` is set: a query with a processing-time trigger every
        ``interval`` seconds (a trigger with nothing new runs no batch)."""
        return self._stream({"processingTime": f"{interval} seconds"}, stop)

    def _stream(self, trigger: dict, stop: threading.Event | None = None) -> BatchResult:
        """The query (stream.py): its source's offsets start where the tables stand, and
        ``foreachBatch`` runs :meth:`batch` up to each batch's end offsets."""
        partitions = self._partitions()
        # the broker restarting, or the capture's topic ownership not read to the end yet
        while (partitions is None or self._watermarks(partitions) is None
               or (self._owned is not None and not self._owned.complete)):
            if (stop or threading.Event()).wait(1.0):
                return BatchResult()
            partitions = self._partitions()
        self._known(partitions)
        start = {stream.key(tp): self._positions[tp] for tp in partitions}
        source = stream.source(functools.partial(discover, is_table_topic=self._is_table_topic,
                                                 truncate_topic=self.truncate_topic))
        self.spark.dataSource.register(source)
        checkpoint = Path(tempfile.mkdtemp(prefix="bottler-warehouse-checkpoint-"))
        total = BatchResult()
        failure: list[BaseException] = []
        started = time.monotonic()

        def each(_frame: Any, batch_id: int) -> None:
            if failure:
                return  # a user's error ended the query, which is stopping (below)
            if batch_id == 0:
                log.info("%s: streaming query's first batch %.1f s after its start", self.name,
                         time.monotonic() - started)
            ends = stream.batch_ends(checkpoint, batch_id)
            try:
                result = self.batch(ends)
                # the broker restarting (no watermarks): the batch is done again once it answers,
                # or the stream, its offsets moved past the tables', would not ask for it again
                while result.unknown:
                    if (stop or threading.Event()).wait(1.0):
                        break
                    result = self.batch(ends)
            except BottlerError as exc:
                # the user's to fix, in one line: not raised through Spark's engine, which
                # would log its Java and Python stack traces; the query is stopped below
                failure.append(exc)
                return
            except BaseException as exc:
                failure.append(exc)
                raise
            for name in ("messages", "changes", "truncates", "dead_letters"):
                setattr(total, name, getattr(total, name) + getattr(result, name))
            total.offsets = result.offsets

        query = (self.spark.readStream.format(source.name())
                 .option("bootstrap", option_value(self.bootstrap))
                 .option("start", json.dumps(start)).option("max", str(self.max_messages))
                 .load().writeStream.foreachBatch(each)
                 .option("checkpointLocation", str(checkpoint)).trigger(**trigger).start())
        try:
            if stop is None:
                while query.isActive and not failure:
                    query.awaitTermination(0.2)
            else:
                while query.isActive and not failure and not stop.wait(0.2):
                    pass
        except Exception:
            if failure:
                raise failure[0] from None
            raise
        finally:
            if query.isActive:
                try:
                    query.stop()
                except Exception as exc:  # noqa: BLE001 - a batch still running past the timeout
                    log.warning("%s: the streaming query did not stop within %s ms: %s; its "
                                "batch ends with the JVM (replayed at the next start)", self.name,
                                STOP_TIMEOUT, str(exc).splitlines()[0])
            shutil.rmtree(checkpoint, ignore_errors=True)
        stream.ended(query, failure, self.name)
        return total

    # -- one batch -----------------------------------------------------------------------

    def batch(self, ends: dict[TopicPartition, int] | None = None) -> BatchResult:
        """One micro-batch, up to ``ends`` (the stream's end offsets; default: the high
        watermarks, at most ``max_messages`` offsets per partition)."""
        started = time.monotonic()
        partitions = self._partitions()
        if partitions is None:  # the broker restarting: nothing new this time
            return BatchResult(offsets=dict(self._positions), unknown=True)
        self._known(partitions)
        start = {tp: self._positions[tp] for tp in partitions}
        marks = self._watermarks(partitions)
        if marks is None:  # as above
            return BatchResult(offsets=start, unknown=True)
        high = {tp: h for tp, (_, h) in marks.items()}
        for tp in positions.replayed(self.name, positions.lost_ends(start, high), start,
                                     self.truncate_topic):
            start[tp] = 0
        result = BatchResult()
        upto = high if ends is None else {tp: min(h, ends.get(tp, h)) for tp, h in high.items()}
        truncates, moved = self._truncates(start, upto, result)
        high = {tp: h for tp, h in high.items() if tp[0] != self.truncate_topic}
        offsets = dict(moved)
        ranges = []
        for tp, h in high.items():
            begin = start.get(tp, 0)
            end = max(begin, h if ends is None else min(h, ends.get(tp, begin)))
            if ends is None and end - begin > self.max_messages:
                end, result.capped = begin + self.max_messages, True
            offsets[tp] = end
            result.messages += end - begin
            ranges += [[tp[0], tp[1], lo, min(lo + self.chunk, end)]
                       for lo in range(begin, end, self.chunk)]
        stage_dir = self._staging() if ranges else None
        spark_started = time.monotonic()
        delta_s = 0.0
        try:
            if stage_dir is not None:  # the Delta tables: the executors stage, delta-rs streams
                staged = self._reader.stage(ranges, stage_dir, result)
                changes, rows = [], staged.rows if staged else 0
            else:  # nothing to read, or a sink taking changes (the core's reference sink)
                staged, changes = None, self._reader.changes(ranges, result) if ranges else []
                rows = len(changes)
            spark_s = time.monotonic() - spark_started
            moved_any = any(start.get(tp) != o for tp, o in offsets.items())
            if truncates or rows or moved_any:
                try:
                    applied = self._write(truncates + changes, offsets, staged)
                except BaseException:
                    self._positions.clear()  # where the tables stand is read again
                    raise
                delta_s = time.monotonic() - spark_started - spark_s
                self._positions.update(offsets)
                metrics.count_changes(self.name, applied)
                for table in (staged.tables.values() if staged else ()):
                    metrics.CHANGES.labels(self.name, "upsert").inc(table.source.upserts)
                    metrics.CHANGES.labels(self.name, "delete").inc(table.source.deletes)
                metrics.BATCHES.labels(self.name).inc()
                metrics.BATCH_SECONDS.labels(self.name).observe(time.monotonic() - started)
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
                     " %d dead letters in %.1f s (Spark %.1f s, Delta %.1f s); offsets %s",
                     self.name, result.messages, result.messages / max(took, 1e-6),
                     changes_count, len(truncates), result.dead_letters, took, spark_s, delta_s,
                     ", ".join(f"{t}[{p}]={o}" for (t, p), o in sorted(offsets.items())))
        return result

    def _partitions(self) -> list[TopicPartition] | None:
        """The partitions to read; None while the broker cannot list its topics (restarting:
        a pause, as for its watermarks)."""
        return discover_or_none(self._consumer, self._is_table_topic, self.truncate_topic,
                                name=self.name)

    def _known(self, partitions: list[TopicPartition]) -> None:
        new = [tp for tp in partitions if tp not in self._positions]
        if new:  # at the start, and for topics created since: where their tables stand
            self._positions.update({tp: 0 for tp in new} | self.sink.stored_offsets(new))

    def _watermarks(self, partitions: Iterable[TopicPartition]) -> watermarks.Watermarks | None:
        return watermarks.read(self._marks, partitions, self.name)

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
                    moves = positions.follow(self.name, barrier, start.get, start)
                    start.update(moves)
                    moved.update(moves)
                    changes.append(change)
            moved[tp] = max(high[tp], start[tp])
        return changes, moved

    def _staging(self) -> Path | None:
        """A fresh staging directory for this batch's rows, when the sink takes staged rows."""
        if not isinstance(self.sink, DeltaSink):
            return None
        path = self.sink.root / STAGING / uuid.uuid4().hex
        path.mkdir(parents=True)
        return path

    def _write(self, changes: list[Change], offsets: dict[TopicPartition, int],
               staged: staging.Batch | None = None) -> list[Change]:
        if staged is not None:
            self.sink.write(changes, offsets, staged.tables)
            self.dead_letters.flush()
            self.sink.flush()
            return changes
        return poison.apply(self.sink, changes, offsets, self.dead_letters,
                            lambda c: self._reader.content(c.topic, c.partition, c.offset))
