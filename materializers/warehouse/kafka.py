"""Reading the ranges with Spark's own Kafka connector (``format("kafka")``), where its jars are
on the classpath (the Docker image carries them): the same rows as the ``bottler_kafka`` data
source (source.py), decoded by the same function in a Python UDF, so everything after the read
(the per-key dedupe, staging, the merge) is shared. What runs only with the connector is this
module."""

from __future__ import annotations

import json
from typing import Any

from common.kafka import Connection, properties
from common.registry_client import Registry
from materializers.warehouse.source import SCHEMA

CONNECTOR = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def available(spark: Any) -> bool:
    """Whether Spark's Kafka connector is on the session's classpath."""
    try:
        spark._jvm.java.lang.Class.forName(CONNECTOR)
    except Exception:  # noqa: BLE001 - py4j raises its own error for a missing class
        return False
    return True


def offsets(ranges: list[list]) -> tuple[str, str]:
    """The connector's ``startingOffsets`` and ``endingOffsets`` (JSON) covering ``ranges``
    (``[topic, partition, start, end]``, end exclusive, as the connector's are)."""
    start: dict[str, dict[str, int]] = {}
    end: dict[str, dict[str, int]] = {}
    for topic, partition, lo, hi in ranges:
        p = str(partition)
        start.setdefault(topic, {})[p] = min(lo, start.get(topic, {}).get(p, lo))
        end.setdefault(topic, {})[p] = max(hi, end.get(topic, {}).get(p, hi))
    return json.dumps(start), json.dumps(end)


def frame(spark: Any, bootstrap: Connection, registry: Registry, ranges: list[list]) -> Any:
    """The ranges read by the connector and decoded (the ``bottler_kafka`` rows); the Kafka
    client properties reach the connector's clients as its ``kafka.*`` options."""
    starting, ending = offsets(ranges)
    reader = spark.read.format("kafka")
    for name, value in properties(bootstrap).items():
        reader = reader.option(f"kafka.{name}", value)
    raw = (reader.option("startingOffsets", starting).option("endingOffsets", ending)
           .option("failOnDataLoss", "false").load())
    return decoded_frame(raw, registry)


def decoded_frame(raw: Any, registry: Registry) -> Any:
    """The connector's rows (``topic, partition, offset, timestamp, key, value``) decoded in
    the executors into the ``bottler_kafka`` rows."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

    def decode(topic, partition, offset, timestamp, key, value):
        from materializers.warehouse.source import decoded, decoder

        return decoded(topic, partition, offset, timestamp, key, value, decoder(registry))

    udf = F.udf(decode, "struct<" + ", ".join(
        ":".join(column.split()) for column in SCHEMA.split(", ")) + ">", useArrow=False)
    millis = (F.unix_micros(F.col("timestamp")) / 1000).cast("long")
    return raw.select(udf("topic", "partition", "offset", millis, "key", "value")
                      .alias("row")).select("row.*")
