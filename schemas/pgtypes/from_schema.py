"""A column's text parser found again from its field in a value schema: for a value a schema
carries as PostgreSQL text (``pg.missing``), read by a view that knows the schema but not the
source's catalog."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas.pgtypes.arrays import array_branches, array_parser
from schemas.pgtypes.datetimes import parse_date, parse_interval, parse_time, timestamp_parser
from schemas.pgtypes.hstore import parse_hstore
from schemas.pgtypes.ranges import multirange_parser, range_parser
from schemas.pgtypes.scalars import (
    ident,
    parse_bool,
    parse_bytea,
    parse_decimal_or_special,
    parse_float4,
    parse_money,
)

_LOGICAL_PARSERS: dict[str, Callable[[str], Any]] = {
    "decimal": parse_money,  # a decimal alone is money (numeric is [decimal, string])
    "date": parse_date,
    "timestamp-micros": timestamp_parser(True),
    "local-timestamp-micros": timestamp_parser(False),
    "time-micros": parse_time,
    "uuid": ident,
}
_PRIMITIVE_PARSERS: dict[str, Callable[[str], Any]] = {
    "boolean": parse_bool, "int": int, "long": int, "float": parse_float4, "double": float,
    "bytes": parse_bytea, "string": ident,
}
_RANGE_FIELDS = ["empty", "lower", "upper", "lower_inclusive", "upper_inclusive"]


def text_parser(avro_type: Any, named: dict[str, dict], pg_type: str = "") -> Callable[[str], Any]:
    """The parser :func:`codec_for` gives a column, found again from the column's field in a
    value schema: its Avro type (references by full name, resolved through ``named``: see
    :func:`schemas.avro_names.resolve_names`) and ``pg.type``. For a value a schema carries as
    PostgreSQL text (``pg.missing``), read by a view that knows the schema but not the source's
    catalog. The value is the one the capture would write, as a view decodes it."""
    t = avro_type
    while True:
        if isinstance(t, list):
            branches = array_branches(t, named)
            if branches is not None:  # an array column: its declared shape tells the nesting
                return _array_text_parser(branches[0], named, pg_type)
            rest = [b for b in t if b != "null"]
            if len(rest) != 1:  # numeric(p,s): [decimal, "string"]
                return parse_decimal_or_special
            t = rest[0]
        elif isinstance(t, str) and t in named:
            t = named[t]
        elif isinstance(t, dict) and (isinstance(t.get("type"), dict | list)
                                      or t.get("type") in named):
            t = t["type"]  # {"type": <a type>}
        else:
            break
    if isinstance(t, str):
        return _PRIMITIVE_PARSERS.get(t, ident)
    logical = _LOGICAL_PARSERS.get(t.get("logicalType", ""))
    if logical is not None:
        return logical
    kind = t.get("type")
    if kind == "record":
        fields = [f["name"] for f in t["fields"]]
        if fields == ["months", "days", "microseconds"]:
            return parse_interval
        if fields == _RANGE_FIELDS:
            return range_parser(text_parser(t["fields"][1]["type"], named))
        return ident
    if kind == "array":
        return _array_text_parser(t, named, pg_type)
    if kind == "map":
        return parse_hstore
    if isinstance(kind, str) and kind in _PRIMITIVE_PARSERS:
        return _PRIMITIVE_PARSERS[kind]
    return ident


def _array_text_parser(t: dict, named: dict[str, dict], pg_type: str) -> Callable[[str], Any]:
    """The parser of an array type found in a schema: non-null ``array`` items are further
    dimensions, nullable items the element (PostgreSQL's array elements are nullable, its
    sub-arrays never); an array of non-null range records is a multirange."""
    items, nesting = t["items"], 1
    while True:
        inner = named.get(items, items) if isinstance(items, str) else items
        if not (isinstance(inner, dict) and inner.get("type") == "array"):
            break
        items, nesting = inner["items"], nesting + 1
    if isinstance(inner, dict) and [f["name"] for f in inner.get("fields", ())] == _RANGE_FIELDS:
        return multirange_parser(text_parser(inner["fields"][1]["type"], named))
    element_pg = pg_type.strip().removesuffix("[]").rsplit(".", 1)[-1].strip('"')
    delim = ";" if element_pg.removesuffix("[]") == "box" else ","
    return array_parser(text_parser(items, named), delim, nesting, pg_type or "array")
