"""fastavro's validation of a datum against a schema, for union resolution only: which branch
would fastavro choose."""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from fastavro.write import LOGICAL_WRITERS

from schemas.avro_writer.decimals import _decimal_bytes, _decimal_fixed
from schemas.avro_writer.errors import AvroValueError
from schemas.avro_writer.schema_info import _logical, _record_type
from schemas.avro_writer.varints import _INT_MAX, _INT_MIN, _LONG_MAX, _LONG_MIN


def _make_validator(comp: Any, schema: Any) -> Callable[[Any], bool]:
    kind = _record_type(schema)
    logical = _logical(schema)
    prepare: Callable[[Any], Any] | None = None
    if logical == "bytes-decimal":
        encode = _decimal_bytes(schema.get("precision"), schema.get("scale", 0))

        def prepare(v: Any) -> Any:
            return encode(v) if isinstance(v, Decimal) else v  # fastavro passes others through

    elif logical == "fixed-decimal":
        fixed = _decimal_fixed(schema.get("precision"), schema.get("scale", 0), schema["size"])

        def prepare(v: Any) -> Any:
            if not isinstance(v, Decimal):
                return v
            try:
                return fixed(v)
            except AvroValueError as exc:
                if "does not fit" in exc.reason:
                    return b""  # fastavro: wrong length, so this branch does not validate
                raise

    elif logical in LOGICAL_WRITERS:
        fastavro_prepare = LOGICAL_WRITERS[logical]

        def prepare(v: Any) -> Any:
            return fastavro_prepare(v, schema)

    base = _base_validator(comp, schema, kind)
    if prepare is None:
        return base
    return lambda v: base(prepare(v))


def _integral(v: Any, low: int, high: int) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool) and low <= v <= high


def _base_validator(comp: Any, schema: Any, kind: str) -> Callable[[Any], bool]:
    if kind == "null":
        return lambda v: v is None
    if kind == "boolean":
        return lambda v: isinstance(v, bool)
    if kind == "string":
        return lambda v: isinstance(v, str)
    if kind == "bytes":
        return lambda v: isinstance(v, bytes | bytearray)
    if kind == "int":
        return lambda v: _integral(v, _INT_MIN, _INT_MAX)
    if kind == "long":
        return lambda v: _integral(v, _LONG_MIN, _LONG_MAX)
    if kind in ("float", "double"):
        return lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool)
    if kind == "fixed":
        size = schema["size"]
        return lambda v: isinstance(v, bytes | bytearray) and len(v) == size
    if kind == "enum":
        symbols = schema["symbols"]
        return lambda v: v in symbols
    if kind == "array":
        items = comp.validator(schema["items"])
        return lambda v: (
            isinstance(v, Sequence) and not isinstance(v, str) and all(items(x) for x in v)
        )
    if kind == "map":
        values = comp.validator(schema["values"])
        return lambda v: (
            isinstance(v, Mapping)
            and all(isinstance(k, str) for k in v)
            and all(values(x) for x in v.values())
        )
    if kind in ("record", "error", "request"):
        fullname = schema["name"]
        fields = [
            (f["name"], f.get("default"), comp.validator(f["type"])) for f in schema["fields"]
        ]

        def record(v: Any) -> bool:
            if not isinstance(v, Mapping):
                return False
            if "-type" in v and v["-type"] != fullname:
                return False
            return all(valid(v.get(name, default)) for name, default, valid in fields)

        return record
    if kind == "union":
        branches = [(b, comp.validator(b)) for b in schema]

        def union(v: Any) -> bool:
            if isinstance(v, tuple):
                name, v = v
                for b, valid in branches:
                    if (b["name"] if _record_type(b) == "record" else b) == name:
                        return valid(v)
                return False
            return any(valid(v) for _, valid in branches)

        return union
    raise ValueError(f"unsupported Avro schema {schema!r}")
