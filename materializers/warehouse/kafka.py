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
POLL_RECORDS = 10_000  # the Java consumer's max.poll.records (librdkafka has no such property)
# ms the broker holds a fetch that finds no record (the Java client's fetch.max.wait.ms, 500)
FETCH_WAIT_MS = 10


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
    # The Java client reads uncommitted data by default: a Kafka transaction (a streamed
    # transaction of the capture, a translator's batch) is read whole once committed, or never.
    out.setdefault("isolation.level", "read_committed")
    # Spark's consumer polls until its range is read: at the Java client's 500 records a
    # poll, a million rows take 2,000 polls (docs/warehouse.md, "The Kafka read")
    out.setdefault("max.poll.records", str(POLL_RECORDS))
    # A task's range ends where the records do (a batch's, at the high watermark), and its
    # last poll fetched past it: the broker held that fetch 500 ms, a task's whole tail
    # (docs/warehouse.md, "A warm server's steady state"); records are there or not, so
    # nothing is gained by the wait
    out.setdefault("fetch.max.wait.ms", str(FETCH_WAIT_MS))
    return {f"kafka.{k}": v for k, v in out.items()}


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
    for name, value in java_properties(bootstrap).items():
        reader = reader.option(name, value)
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
