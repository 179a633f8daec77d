"""Writing events in Confluent's wire format: the output schemas are registered once at start,
then each key and value is written by the project's compiled Avro writer (fastavro's bytes,
faster), framed with its schema id."""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import fastavro
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from common.errors import BottlerError
from materializers.translators.api import Event, Output
from schemas.avro_writer import compile_writer

_HEADER = struct.Struct(">bI")  # magic byte 0, the schema id


class EncodeError(Exception):
    """An event its topic's schema cannot hold: a failure of the change that produced it."""


class _Writer:
    def __init__(self, registry: SchemaRegistryClient, subject: str, schema: Any):
        text = schema if isinstance(schema, str) else json.dumps(schema)
        try:
            schema_id = registry.register_schema(subject, Schema(text, "AVRO"))
        except SchemaRegistryError as exc:
            hint = ("make the new schema compatible with the registered one, or publish to a "
                    "new topic" if exc.http_status_code == 409 else "check the registry")
            raise BottlerError(f"cannot register the schema of {subject}: {exc}", hint) from None
        except Exception as exc:  # noqa: BLE001 - the registry cannot be reached
            raise BottlerError(f"cannot register the schema of {subject}: {exc}",
                               "check that the schema registry (--schema-registry) is up") from None
        self.parsed = fastavro.parse_schema(json.loads(text))
        self._write = compile_writer(text, prefix=_HEADER.pack(0, schema_id))
        # Short record names of a union, so that an event may name its type either way.
        self.names: dict[str, str] = {}
        if isinstance(self.parsed, list):
            for branch in self.parsed:
                if isinstance(branch, dict) and "name" in branch:
                    full = branch["name"]
                    self.names[full] = self.names[full.rsplit(".", 1)[-1]] = full

    def encode(self, datum: Any, record: str | None = None) -> bytes:
        if self.names:
            if record is None:
                raise EncodeError("the value schema is a union of records: the event needs a "
                                  f"type (one of {', '.join(sorted(set(self.names.values())))})")
            full = self.names.get(record)
            if full is None:
                raise EncodeError(f"no record {record!r} in the value schema")
            datum = (full, datum)
        try:
            return self._write(datum)
        except Exception as exc:  # noqa: BLE001 - any mismatch is the event's fault
            raise EncodeError(f"{type(exc).__name__}: {exc}") from None


class EventEncoder:
    """Registers the outputs' schemas (``<topic>-key``, ``<topic>-value``; ``topics`` maps
    each declared topic to the real one, prefix included) and encodes events."""

    def __init__(self, registry: SchemaRegistryClient, outputs: list[Output],
                 topics: Mapping[str, str]):
        self.topics = dict(topics)
        self._writers: dict[str, tuple[_Writer, _Writer]] = {}
        for output in outputs:
            topic = self.topics[output.topic]
            self._writers[output.topic] = (
                _Writer(registry, f"{topic}-key", output.key_schema),
                _Writer(registry, f"{topic}-value", output.value_schema),
            )

    def encode(self, event: Event) -> tuple[str, bytes, bytes]:
        """(real topic, key bytes, value bytes); EncodeError for an event that does not fit."""
        writers = self._writers.get(event.topic)
        if writers is None:
            raise EncodeError(f"{event.topic!r} is not an output topic of this translator "
                              f"({', '.join(self._writers)})")
        key_writer, value_writer = writers
        if event.key is None:
            raise EncodeError("an event without a key (events are keyed, to keep their order)")
        return (self.topics[event.topic], key_writer.encode(event.key),
                value_writer.encode(event.value, event.type))
