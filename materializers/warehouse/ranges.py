"""Reading a warehouse micro-batch's offset ranges with Spark (job.py): each range read and
decoded by an executor (source.py, or Spark's Kafka connector where its jars are: kafka.py), the
last event per key kept (each range's read keeps its own; a window over the key when a
partition spans several ranges), then either staged as Parquet by the executors (staging.py;
the Delta tables) or collected as changes (a sink taking changes: the core's reference sink).
Undecodable messages go by the poison policy; the driver reads a set-aside message's key and
value back from Kafka (it never had them). ``result``: the batch's result, whose
``dead_letters`` count the messages set aside.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

from common.kafka import Connection
from common.registry_client import Registry
from materializers.core import poison
from materializers.core.changes import Change, table_of
from materializers.core.decode import Decoder
from materializers.core.poison import DeadLetters
from materializers.warehouse import kafka, staging
from materializers.warehouse.source import NAME, option_value, read_range


class RangeReading:
    """Reads offset ranges ``[topic, partition, start, end]`` in ``spark``."""

    def __init__(self, spark: Any, bootstrap: Connection, registry: Registry, decoder: Decoder,
                 dead_letters: DeadLetters):
        self.spark = spark
        self.bootstrap, self.registry = bootstrap, registry
        self.decoder = decoder
        self.dead_letters = dead_letters
        self._connector: bool | None = None  # Spark's Kafka connector on the classpath

    def deduplicated(self, ranges: list[list]) -> Any:
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
            if len({(r[0], r[1]) for r in ranges}) == len(ranges):
                return frame  # one range per partition: each read kept its keys' last events
        last = Window.partitionBy("topic", "identity").orderBy(
            F.col("partition").desc(), F.col("offset").desc())
        return frame.withColumn("_rank", F.row_number().over(last)).where("_rank = 1") \
            .drop("_rank")

    def changes(self, ranges: list[list], result: Any) -> list[Change]:
        """The deduplicated rows collected as changes: for a sink that takes changes only."""
        rows = self.deduplicated(ranges).collect()
        changes = []
        for row in sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"])):
            if row["op"] == "poison":
                at = row["topic"], row["partition"], row["offset"]
                self.dead_letters.at(*at, row["error"], "DecodeError",
                                     lambda at=at: self.content(*at))
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

    def stage(self, ranges: list[list], directory: Path, result: Any) -> staging.Batch:
        """Spark: read and decode the ranges, keep the last event per key, and stage the
        survivors as Parquet in ``directory`` (executors); the driver reads the footers."""
        self.deduplicated(ranges).write.format(staging.NAME).mode("append") \
            .option("dir", str(directory)).option("registry", option_value(self.registry)).save()
        staged = staging.read(directory, self.decoder)
        for p in sorted(staged.poison, key=lambda p: (p.topic, p.partition, p.offset)):
            at = p.topic, p.partition, p.offset
            self.dead_letters.at(*at, p.reason, p.error, lambda at=at: self.content(*at))
            result.dead_letters += 1
        return staged

    def content(self, topic: str, partition: int, offset: int) -> poison.Content:
        """The key and value of a message set aside, read back: the driver never had them."""
        msg = next(read_range(self.bootstrap, topic, partition, offset, offset + 1), None)
        return (msg.key(), msg.value()) if msg is not None else (None, None)
