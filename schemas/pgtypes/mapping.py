"""The mapping itself: a column's PostgreSQL type (with its typmod and dimensions) → its Avro
schema and the parser of its text output, as a :class:`~schemas.pgtypes.avro.Codec`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from schemas.pgtypes.arrays import array_parser, general_array_schema
from schemas.pgtypes.avro import Codec, avro_name, nullable, short_hash, type_namespace
from schemas.pgtypes.datetimes import (
    INTERVAL_SCHEMA,
    parse_date,
    parse_interval,
    parse_time,
    timestamp_parser,
)
from schemas.pgtypes.hstore import parse_hstore
from schemas.pgtypes.model import Column, PgType
from schemas.pgtypes.ranges import multirange_parser, range_parser, range_schema
from schemas.pgtypes.scalars import (
    ident,
    parse_bool,
    parse_bytea,
    parse_decimal_or_special,
    parse_float4,
    parse_money,
)

_STRING = "string"

# pg_catalog base types with a dedicated mapping: name → (schema, parser).
_SCALARS: dict[str, tuple[Any, Callable[[str], Any]]] = {
    "bool": ("boolean", parse_bool),
    "int2": ("int", int),
    "int4": ("int", int),
    "int8": ("long", int),
    "oid": ("long", int),
    "xid": ("long", int),
    "cid": ("long", int),
    "float4": ("float", parse_float4),
    "float8": ("double", float),
    "money": (
        {"type": "bytes", "logicalType": "decimal", "precision": 19, "scale": 2},
        parse_money,
    ),
    "bytea": ("bytes", parse_bytea),
    "uuid": ({"type": "string", "logicalType": "uuid"}, ident),
    "date": ({"type": "int", "logicalType": "date"}, parse_date),
    "timestamp": (
        {"type": "long", "logicalType": "local-timestamp-micros"},
        timestamp_parser(False),
    ),
    "timestamptz": ({"type": "long", "logicalType": "timestamp-micros"}, timestamp_parser(True)),
    "time": ({"type": "long", "logicalType": "time-micros"}, parse_time),
    "interval": (INTERVAL_SCHEMA, parse_interval),
}


def numeric_precision_scale(typmod: int) -> tuple[int, int] | None:
    """(precision, scale) of a numeric typmod, None when unconstrained. The scale is read as a
    signed 11-bit field (PostgreSQL 15 allows negative scales and scales above the precision);
    for older servers, whose scales are 0..precision, this is the same as ``& 0xffff``."""
    if typmod < 4:
        return None
    tm = typmod - 4
    scale = tm & 0x7FF
    if scale & 0x400:
        scale -= 0x800
    return (tm >> 16) & 0xFFFF, scale


def _numeric(typmod: int) -> tuple[Any, Callable[[str], Any]]:
    ps = numeric_precision_scale(typmod)
    if ps is None:
        return _STRING, ident  # exact decimal text, "NaN", "Infinity", "-Infinity"
    precision, scale = ps
    if scale < 0:  # numeric(3,-2) holds integers up to 99900: 5 digits, scale 0
        precision, scale = precision - scale, 0
    elif scale > precision:  # numeric(2,4) holds 0.0099 at most: 4 digits, scale 4
        precision = scale
    decimal = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    return [decimal, _STRING], parse_decimal_or_special


def _build(pg: PgType, typmod: int, nesting: int) -> tuple[Any, Callable[[str], Any], str]:
    """(schema, parser, type name for messages) of ``pg`` with ``typmod``; ``nesting`` is the
    number of array dimensions to expect if ``pg`` turns out to be an array type."""
    kind = pg.kind
    if kind == "d":
        if pg.base is None:
            return _STRING, ident, pg.name
        schema, parse, _ = _build(
            pg.base, typmod if typmod >= 0 else pg.typmod, max(nesting, pg.ndims, 1)
        )
        return schema, parse, pg.name
    if pg.element is not None and pg.category == "A":
        elem = pg.element
        elem_schema, elem_parse, elem_name = _build(elem, typmod, 1)
        leaf = nullable(elem_schema)
        items: Any = leaf
        for _ in range(max(nesting, 1) - 1):  # sub-arrays are never null: only the leaf is
            items = {"type": "array", "items": items}
        name = f"{elem_name}[]"
        parse = array_parser(elem_parse, elem.array_delimiter, max(nesting, 1), name)
        # One record per element type, whatever the column's dimensions; a typmod that
        # changes the element's schema (numeric(p,s)) gets its own record.
        record = f"{avro_name(elem.name, stable=True)}_array"
        if typmod >= 0 and elem_schema != _build(elem, -1, 1)[0]:
            record += "_" + short_hash(json.dumps(elem_schema, sort_keys=True))
        general = general_array_schema(record, type_namespace(elem), leaf)
        return [{"type": "array", "items": items}, general], parse, name
    if kind == "e":
        return {"type": "string", "pg.enum": list(pg.labels)}, ident, pg.name
    if kind == "r" and pg.subtype is not None:
        bound_schema, bound_parse, _ = _build(pg.subtype, -1, 1)
        return range_schema(pg, bound_schema), range_parser(bound_parse), pg.name
    if kind == "m" and pg.subtype is not None:
        rng = pg.subtype
        if rng.kind != "r":  # given the bound type itself: name the record after the multirange
            rng = PgType(0, pg.name + "_range", pg.schema, "r", "R", subtype=rng)
        if rng.subtype is None:
            return _STRING, ident, pg.name
        bound_schema, bound_parse, _ = _build(rng.subtype, -1, 1)
        schema = {"type": "array", "items": range_schema(rng, bound_schema)}
        return schema, multirange_parser(bound_parse), pg.name
    if pg.name == "hstore" and kind == "b":
        return {"type": "map", "values": ["null", _STRING]}, parse_hstore, pg.name
    if pg.schema == "pg_catalog" and kind == "b":
        if pg.name == "numeric":
            schema, parse = _numeric(typmod)
            return schema, parse, pg.name
        scalar = _SCALARS.get(pg.name)
        if scalar is not None:
            return scalar[0], scalar[1], pg.name
    # Text types, json, network, geometric, bit strings, composites, extension types, anything
    # unknown: the type's text output, exactly.
    return _STRING, ident, pg.name


def codec_for(column: Column) -> Codec:
    """The :class:`Codec` of ``column`` (build it once per column, reuse it for every row)."""
    schema, parse, name = _build(column.type, column.typmod, max(column.ndims, 1))
    if parse is ident:
        parse = str  # the identity, in C: row encoders recognise it and skip the call
    return Codec(schema, parse, column.formatted or name)
