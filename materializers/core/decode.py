"""Decoding Confluent-framed Avro through the schema registry, with a schema cache by id."""

from __future__ import annotations

import io
import json
import logging
import struct
from dataclasses import dataclass
from typing import Any

import fastavro
from confluent_kafka import Message
from confluent_kafka.schema_registry.error import SchemaRegistryError

from common.registry_client import Registry, registry_client
from materializers.core.changes import Change, TableId, table_of
from schemas.avro_reader import Reader, compile_reader
from schemas.avro_schema import without_logical_types
from schemas.serde import split
from schemas.temporal import logical_temporal

log = logging.getLogger(__name__)

_FRAME = 5  # Confluent's framing: magic byte 0, then the schema id (4 bytes, big-endian)
_ID = struct.Struct(">I")
reader = fastavro.schemaless_reader


def split_id(data: bytes) -> int:
    """The schema id of a framed message (ValueError as :func:`schemas.serde.split` raises)."""
    if len(data) < _FRAME or data[0] != 0:
        split(data)  # raises with its message
    return _ID.unpack_from(data, 1)[0]


class DecodeError(Exception):
    """A message that cannot be decoded: not in the wire format, an id the registry does not
    know, a body that does not match its schema. A poison message, never a transient failure
    (an unreachable registry raises the registry's own error instead)."""


@dataclass(frozen=True, slots=True)
class WriterSchema:
    id: int
    schema: dict[str, Any]  # the registered schema (parsed JSON, pg.* attributes kept)
    parsed: Any  # fastavro's parsed form, without date/time logical types
    names: tuple[str, ...]  # the record's field names (empty for a non-record)
    # read(data, start): the compiled decoder of the body (same datum as fastavro, faster);
    # None for the few schemas it does not compile (see schemas.avro_reader), read by fastavro
    read: Reader | None = None


class Decoder:
    """Decodes message keys and values. Schemas are fetched once per id and kept."""

    def __init__(self, registry: Registry):
        self.registry = registry_client(registry)
        self._schemas: dict[int, WriterSchema] = {}

    def schema(self, schema_id: int) -> WriterSchema:
        cached = self._schemas.get(schema_id)
        if cached is not None:
            return cached
        try:
            registered = self.registry.get_schema(schema_id)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                raise DecodeError(f"schema id {schema_id} is not in the registry") from None
            raise
        if registered.schema_type not in (None, "AVRO"):
            raise DecodeError(f"schema id {schema_id} is {registered.schema_type}, not Avro")
        try:
            # either temporal mode reads as the logical one: views map types one way
            schema = logical_temporal(json.loads(registered.schema_str))
            plain = without_logical_types(schema)
            parsed = fastavro.parse_schema(plain)
        except (ValueError, fastavro.schema.SchemaParseException) as exc:
            raise DecodeError(f"schema id {schema_id} is not a valid Avro schema: {exc}") from None
        record = schema if isinstance(schema, dict) else {}
        names = tuple(f["name"] for f in record.get("fields", ()) if isinstance(f, dict))
        writer = WriterSchema(schema_id, record, parsed, names, compile_reader(plain))
        self._schemas[schema_id] = writer
        return writer

    def decode(self, data: bytes) -> tuple[WriterSchema, Any]:
        """(writer schema, decoded datum) of one framed message."""
        try:
            schema_id = split_id(data)
        except ValueError as exc:
            raise DecodeError(str(exc)) from None
        writer = self._schemas.get(schema_id) or self.schema(schema_id)
        if writer.read is not None:
            try:
                return writer, writer.read(data, _FRAME)
            except (ValueError, IndexError, UnicodeDecodeError, struct.error) as exc:
                raise DecodeError(f"the body does not match schema id {schema_id}: {exc}") from None
        buffer = io.BytesIO(data)
        buffer.seek(_FRAME)  # the body, without copying it
        try:
            datum = reader(buffer, writer.parsed, None)
        except Exception as exc:  # noqa: BLE001 - any failure of the body is a poison message
            raise DecodeError(
                f"the body does not match schema id {schema_id}: {type(exc).__name__}: {exc}"
            ) from None
        if buffer.tell() != len(data):
            raise DecodeError(
                f"{len(data) - buffer.tell()} bytes left after decoding with schema id {schema_id}"
            )
        return writer, datum

    def decode_key(self, data: bytes, value: dict[str, Any] | None) -> tuple[WriterSchema, Any]:
        """(writer schema, decoded key) of a framed key. With the row's decoded ``value``, the
        key's fields are taken from it instead of decoding the key's body: the capture builds
        the key record from the same row (the same field names and values), and decoding costs
        as much as the value itself. A key the value does not cover is decoded."""
        if value is None:
            return self.decode(data)
        try:
            schema_id = split_id(data)
        except ValueError as exc:
            raise DecodeError(str(exc)) from None
        writer = self._schemas.get(schema_id) or self.schema(schema_id)
        if not writer.names:
            return self.decode(data)
        try:
            return writer, {name: value[name] for name in writer.names}
        except KeyError:
            return self.decode(data)


def truncate_event(decoder: Decoder, data: bytes | None) -> tuple[str, TableId, dict[int, int]]:
    """(table topic, table, barrier: partition -> end offset at the truncate) of an event of
    the truncate control topic; DecodeError for anything else."""
    try:
        if data is None:
            raise DecodeError("a truncate event without a value")
        _, event = decoder.decode(data)
        barrier = {int(p): int(o) for p, o in event["offsets"].items()}
        return event["topic"], TableId(event["schema"], event["table"]), barrier
    except (DecodeError, KeyError, TypeError, ValueError) as exc:
        raise DecodeError(f"invalid truncate event: {exc}") from None


class ChangeReader:
    """A table topic's messages as changes, for the loop named ``name``: key and value decoded
    (the key from the value where it can: :meth:`Decoder.decode_key`), the table named by the
    writer schema's ``pg.table`` (kept per schema id)."""

    def __init__(self, decoder: Decoder, name: str):
        self.decoder = decoder
        self.name = name
        self._tables: dict[int, TableId | None] = {}  # writer schema id -> its table

    def change(self, msg: Message) -> Change | None:
        """The change a message carries; None for a message of a topic that is not a table
        topic (passed over); DecodeError for one that cannot be decoded."""
        key, value = msg.key(), msg.value()
        vschema, vdatum = self.decoder.decode(value) if value is not None else (None, None)
        kschema, kdatum = (self.decoder.decode_key(key, vdatum) if key is not None
                           else (None, None))
        if kschema is None and vschema is None:
            raise DecodeError("a message with neither key nor value")
        if (kdatum is not None and kdatum.__class__ is not dict) or (
                vdatum is not None and vdatum.__class__ is not dict):
            for datum in (kdatum, vdatum):
                if datum is not None and not isinstance(datum, dict):
                    raise DecodeError(f"not an Avro record: {type(datum).__name__}")
        writer = vschema if vschema is not None else kschema
        table = self._tables.get(writer.id, False)
        if table is False:
            table = self._tables[writer.id] = self._table_of(msg.topic(), writer.schema)
        if table is None:
            return None
        return Change(
            msg.topic(), table, "upsert" if vdatum is not None else "delete",
            kdatum, vdatum, msg.partition(), msg.offset(),
            kschema.id if kschema else None,
            vschema.id if vschema else None,
            kschema.schema if kschema else None,
            vschema.schema if vschema else None,
            None, msg.timestamp()[1],
        )

    def _table_of(self, topic: str, schema: dict) -> TableId | None:
        """The source table of a writer schema; None for a topic that is not a table topic
        (its records lack the capture's ``pg.table``: business events that a translator writes
        under the same prefix, say), whose messages are passed over."""
        if "pg.table" not in schema:
            log.warning("%s: %s is not a table topic (its records have no pg.table attribute):"
                        " passed over", self.name, topic)
            return None
        return table_of(schema)
