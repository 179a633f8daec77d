"""Kafka topic-partition offset ranges as a PySpark Python data source (``bottler_kafka``), for
Spark sessions without Spark's own Kafka connector on their classpath (where its jars are,
kafka.py reads the same ranges with it, and the ``--route spark`` of native.py always uses it):
every Spark partition reads one offset range with confluent-kafka and decodes it through the
schema registry, in the executors.

Rows, the last event of each key in the range: ``topic, partition, offset, timestamp, op``
(``upsert``, ``delete``, or ``poison`` for a message that does not decode), ``identity`` (the key
as canonical JSON; ``@partition:offset`` for an unkeyed row, which has no key;
``!partition:offset`` for a poison message), the writer schema ids, ``payload`` (the decoded
``(key, value)`` pickled: Decimals, bytes and nested records pass through unchanged) and
``error`` (why a poison message did not decode).

Options: ``bootstrap``, ``registry``, ``ranges`` (JSON ``[[topic, partition, start, end], …]``,
end exclusive, at most the high watermark when planned).
"""

from __future__ import annotations

import json
import pickle
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from common.kafka import Connection, reader_config
from common.registry_client import Registry
from materializers.core.decode import DecodeError, Decoder

NAME = "bottler_kafka"
SCHEMA = ("topic string, partition int, offset long, timestamp long, op string, "
          "identity string, key_schema_id int, value_schema_id int, payload binary, "
          "error string")
STALL = 60.0  # seconds without a message before a range read gives up

_decoders: dict[str, Decoder] = {}  # per Python worker: schemas fetched once per id


def decoder(registry: Registry) -> Decoder:
    key = json.dumps(registry, sort_keys=True) if isinstance(registry, Mapping) else registry
    found = _decoders.get(key)
    if found is None:
        found = _decoders[key] = Decoder(registry)
    return found


def option_value(value: str | Mapping[str, str]) -> str:
    """A connection (servers or URL, or client properties) as a Spark option: a string."""
    return json.dumps(dict(value)) if isinstance(value, Mapping) else value


def from_option(value: str) -> str | dict[str, str]:
    return json.loads(value) if value.startswith("{") else value


def read_range(bootstrap: Connection, topic: str, partition: int, start: int,
               end: int) -> Iterator[Message]:
    """The messages of ``topic[partition]`` from ``start`` up to ``end`` (exclusive), which
    the partition's high watermark must have reached (compaction may leave gaps)."""
    if start >= end:
        return
    consumer = Consumer(reader_config(bootstrap, "warehouse-ranges", **{
        "enable.partition.eof": True, "fetch.max.bytes": 64 << 20}))
    try:
        consumer.assign([KafkaTopicPartition(topic, partition, start)])
        last = time.monotonic()
        while True:
            messages = consumer.consume(2000, 1.0)
            if not messages and time.monotonic() - last > STALL:
                raise TimeoutError(f"{topic}[{partition}]: no message for {STALL:.0f} s "
                                   f"reading {start}..{end}")
            for msg in messages:
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return  # the log's end: at or past ``end``
                    if error.fatal() or not error.retriable():
                        raise KafkaException(error)
                    continue
                last = time.monotonic()
                offset = msg.offset()
                if offset >= end:
                    return
                yield msg
                if offset == end - 1:
                    return
    finally:
        consumer.close()


def decoded_row(msg: Message, decode: Decoder) -> tuple:
    """One row of the data source for one message."""
    return decoded(msg.topic(), msg.partition(), msg.offset(), msg.timestamp()[1], msg.key(),
                   msg.value(), decode)


def decoded(topic: str, partition: int, offset: int, timestamp: int, key: bytes | None,
            value: bytes | None, decode: Decoder) -> tuple:
    """One row of the data source for one message's parts: what both readers (this data
    source, and Spark's Kafka connector where its jars are: kafka.py) produce."""
    try:
        kschema, kdatum = decode.decode(key) if key is not None else (None, None)
        vschema, vdatum = decode.decode(value) if value is not None else (None, None)
        if kschema is None and vschema is None:
            raise DecodeError("a message with neither key nor value")
        for datum in (kdatum, vdatum):
            if datum is not None and not isinstance(datum, dict):
                raise DecodeError(f"not an Avro record: {type(datum).__name__}")
    except DecodeError as exc:
        return (topic, partition, offset, timestamp, "poison", f"!{partition}:{offset}",
                None, None, None, str(exc))
    identity = (json.dumps(kdatum, sort_keys=True, default=str) if kdatum is not None
                else f"@{partition}:{offset}")
    return (topic, partition, offset, timestamp, "upsert" if vdatum is not None else "delete",
            identity, kschema.id if kschema else None, vschema.id if vschema else None,
            pickle.dumps((kdatum, vdatum), protocol=pickle.HIGHEST_PROTOCOL), None)


@dataclass
class OffsetRange(InputPartition):
    topic: str
    partition: int
    start: int
    end: int

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class RangeReader(DataSourceReader):
    def __init__(self, options: dict[str, Any]):
        self.bootstrap = from_option(options["bootstrap"])
        self.registry = from_option(options["registry"])
        self.ranges = [OffsetRange(*r) for r in json.loads(options["ranges"])]

    def partitions(self) -> list[OffsetRange]:
        return self.ranges

    def read(self, partition: OffsetRange) -> Iterator[tuple]:
        """The range's rows, the last event of each key only: every event of a key is in one
        partition, so a range that covers its topic-partition's part of the batch leaves the
        job no dedupe to do (job.py skips its window then)."""
        decode = decoder(self.registry)
        last: dict[str, tuple] = {}
        for msg in read_range(self.bootstrap, partition.topic, partition.partition,
                              partition.start, partition.end):
            row = decoded_row(msg, decode)
            last.pop(row[5], None)  # identity: the key's last event goes last
            last[row[5]] = row
        yield from last.values()


class KafkaRanges(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> RangeReader:
        return RangeReader(self.options)
