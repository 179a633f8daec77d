"""How rows become Kafka keys and values: one codec per table and schema version, built from the
table's columns, with the schemas registered under `<topic>-key` / `<topic>-value`.

Snapshot workers import this module: it stays free of the schema-registry client (registrar.py),
which weighs ~20 MB per process."""

from __future__ import annotations

import base64
import decimal
import itertools
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from schemas.avro_schema import record_schemas, row_encoder, row_writer
from schemas.pgtypes import Column, TypeConversionError, codec_for
from schemas.serde import AvroEncoder, header

if TYPE_CHECKING:
    from capture.publish.registrar import Registrar

log = logging.getLogger(__name__)
_serials = itertools.count(1)


@dataclass(frozen=True)
class CodecSpec:
    """Everything needed to encode one table's rows; plain data, so workers can receive it."""

    schema: str
    table: str
    topic: str
    columns: tuple[Column, ...]
    key_columns: tuple[str, ...]
    fmt: str  # "avro" or "json"
    key_schema: dict | None
    value_schema: dict
    key_id: int | None = None
    value_id: int | None = None

    @property
    def qualified(self) -> tuple[str, str]:
        return (self.schema, self.table)

    def codec(self) -> TableCodec:
        return TableCodec(self)


def make_spec(
    schema: str, table: str, topic: str, columns: list[Column], key_columns: list[str],
    fmt: str, registrar: Registrar | None, temporal_mode: str = "logical",
    renamed: dict[str, tuple[str, str]] | None = None,
) -> CodecSpec:
    key_schema, value_schema = record_schemas(schema, table, columns, key_columns, temporal_mode,
                                              renamed)
    key_id = value_id = None
    if fmt == "avro":
        if key_schema is not None:
            key_id = registrar.register(f"{topic}-key", key_schema)
        value_id = registrar.register(f"{topic}-value", value_schema)
    return CodecSpec(schema, table, topic, tuple(columns), tuple(key_columns), fmt,
                     key_schema, value_schema, key_id, value_id)


class Unencodable(ValueError):
    """A row (or its key) the codec cannot encode; whoever knows the row makes it a DataError
    (capture/publish/errors.py) for --on-error."""


class TableCodec:
    def __init__(self, spec: CodecSpec):
        self.spec = spec
        self.serial = next(_serials)  # which codec this is, for a process that keeps copies
        self.topic = spec.topic
        self.qualified = f"{spec.schema}.{spec.table}"
        self.keyed = bool(spec.key_columns)
        codecs = [codec_for(c) for c in spec.columns]  # once for the encoders and writers
        self._value_record = row_encoder(spec.columns, codecs=codecs)
        self._key_record = (row_encoder(spec.columns, spec.key_columns, codecs=codecs)
                            if self.keyed else None)
        self._write_key = self._write_value = None  # texts to bytes, no dict between
        if spec.fmt == "avro":
            self._encode_value = AvroEncoder(spec.value_id, spec.value_schema).encode
            self._write_value = row_writer(spec.columns, spec.value_schema,
                                           prefix=header(spec.value_id), codecs=codecs)
            if self.keyed:
                self._encode_key = AvroEncoder(spec.key_id, spec.key_schema).encode
                self._write_key = row_writer(spec.columns, spec.key_schema, spec.key_columns,
                                             header(spec.key_id), codecs=codecs)
        else:
            self._encode_value = self._encode_key = encode_json

    def key(self, values) -> bytes | None:
        if not self.keyed:
            return None
        if self._write_key is not None:
            try:
                return self._write_key(values)
            except Exception:  # noqa: BLE001, S110 - the dict's way below says what is wrong
                pass
        try:
            return self._encode_key(self._key_record(values))
        except (TypeConversionError, ValueError, TypeError) as exc:
            raise Unencodable(f"{self.qualified}: cannot encode the key: {exc}") from None

    def value(self, values) -> bytes:
        if self._write_value is not None:
            try:
                return self._write_value(values)
            except Exception:  # noqa: BLE001, S110 - as for the key
                pass
        try:
            return self._encode_value(self._value_record(values))
        except (TypeConversionError, ValueError, TypeError) as exc:
            raise Unencodable(f"{self.qualified}: cannot encode a row: {exc}") from None


def encode_json(record: dict) -> bytes:
    return json.dumps(record, default=_json_default, separators=(",", ":")).encode()


def _json_default(value: Any):
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")
