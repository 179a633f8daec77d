"""Decoded Avro values back to PostgreSQL's text input, and target column types.

The inverse of :mod:`schemas.pgtypes`: a value decoded by the materializer core (without date/time
logical types: days, microseconds; ``Decimal`` for decimals) becomes the text PostgreSQL reads
back into the same value. :func:`text_converter` builds, once per field, a function
``value -> str`` (never called with None); :func:`copy_escape` applies COPY's text-format escapes.
:func:`derived_type` gives the PostgreSQL type of a field whose ``pg.type`` is not a built-in type
of the target (enums, domains, extension types): from its Avro type.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from schemas.pgtypes import (
    DATE_NEG_INFINITY,
    DATE_POS_INFINITY,
    INTERVAL_NEG_INFINITY,
    INTERVAL_POS_INFINITY,
    TS_NEG_INFINITY,
    TS_POS_INFINITY,
    array_branches,
    civil_from_days,
    nested_elements,
)

__all__ = [
    "Converter",
    "copy_escape",
    "derived_type",
    "text_converter",
    "unwrap_null",
]

Converter = Callable[[Any], str]

_DAY_MICROS = 86_400_000_000
_EPOCH = datetime(1970, 1, 1)
_MIN_FAST = -62135596800000000  # 0001-01-01 00:00:00
_MAX_FAST = 253402300800000000  # 10000-01-01 00:00:00


# --------------------------------------------------------------------------- schema helpers


def unwrap_null(avro_type: Any) -> Any:
    """``T`` of ``["null", T]``; other types unchanged."""
    if isinstance(avro_type, list):
        rest = [t for t in avro_type if t != "null"]
        if len(rest) == 1:
            return rest[0]
        return rest
    return avro_type


def _resolve(avro_type: Any, named: Mapping[str, dict]) -> Any:
    """The type a field holds: nullability dropped, a reference (a full name: the schema went
    through :func:`schemas.avro_names.resolve_names`) replaced by its definition."""
    avro_type = unwrap_null(avro_type)
    if isinstance(avro_type, str) and avro_type in named:
        return named[avro_type]
    if isinstance(avro_type, dict) and isinstance(avro_type.get("type"), dict | list):
        return _resolve(avro_type["type"], named)
    return avro_type


def _is_interval(schema: Any) -> bool:
    return (isinstance(schema, dict) and schema.get("type") == "record"
            and [f["name"] for f in schema["fields"]] == ["months", "days", "microseconds"])


def _is_range(schema: Any) -> bool:
    return (isinstance(schema, dict) and schema.get("type") == "record"
            and [f["name"] for f in schema["fields"]]
            == ["empty", "lower", "upper", "lower_inclusive", "upper_inclusive"])


# --------------------------------------------------------------------------- target types

_RANGES = {"int": "int4range", "long": "int8range", "date": "daterange",
           "local-timestamp-micros": "tsrange", "timestamp-micros": "tstzrange"}


def derived_type(avro_type: Any, named: Mapping[str, dict], hstore: bool = False) -> str:
    """The PostgreSQL type of an Avro field type (for columns whose ``pg.type`` the target does
    not have as a built-in): enums, composites and unknown types are ``text``, domains their base
    as the Avro type tells it, hstore maps ``hstore`` (``hstore=True``: the target has it) or
    ``jsonb``."""
    branches = array_branches(avro_type, named)
    if branches is not None:  # an array column: its declared shape
        return derived_type(branches[0], named, hstore)
    t = _resolve(avro_type, named)
    if isinstance(t, list):  # numeric(p,s): [decimal, "string"]
        decimals = [x for x in t if isinstance(x, dict) and x.get("logicalType") == "decimal"]
        if decimals:
            return f"numeric({decimals[0]['precision']},{decimals[0]['scale']})"
        return "text"
    if isinstance(t, str):
        return {"boolean": "boolean", "int": "integer", "long": "bigint", "float": "real",
                "double": "double precision", "bytes": "bytea"}.get(t, "text")
    logical = t.get("logicalType")
    if logical == "decimal":
        return f"numeric({t['precision']},{t['scale']})"
    if logical is not None:
        return {"uuid": "uuid", "date": "date", "timestamp-micros": "timestamp with time zone",
                "local-timestamp-micros": "timestamp without time zone",
                "time-micros": "time without time zone"}.get(logical, "text")
    kind = t.get("type")
    if kind == "array":
        items = t["items"]
        inner = named.get(items, items) if isinstance(items, str) else items
        if isinstance(inner, dict) and inner.get("type") == "array":
            return derived_type(inner, named, hstore)  # a further dimension
        if _is_range(inner):
            return "text"  # a user multirange: kept as its text
        element = derived_type(items, named, hstore)
        # elements that are arrays themselves (a domain over an array) have no array type of
        # their own: kept as their text
        return ("text" if element.endswith("[]") else element) + "[]"
    if kind == "map":
        return "hstore" if hstore else "jsonb"
    if _is_interval(t):
        return "interval"
    if kind in ("boolean", "int", "long", "float", "double", "bytes"):
        return derived_type(kind, named, hstore)
    return "text"


# --------------------------------------------------------------------------- converters


def _bool(v: bool) -> str:
    return "t" if v else "f"


def _float(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)


def _decimal(v: Any) -> str:
    if isinstance(v, Decimal):
        if not v.is_finite():
            return "NaN" if v.is_nan() else ("Infinity" if v > 0 else "-Infinity")
        return format(v, "f")
    return str(v)  # the string branch: "NaN", "Infinity", or an unconstrained numeric's text


def _bytes(v: bytes) -> str:
    return "\\x" + v.hex()


def _ymd(year: int, month: int, day: int) -> tuple[str, str]:
    """(``YYYY-MM-DD``, era suffix) of an astronomical year."""
    if year <= 0:
        return f"{1 - year:04d}-{month:02d}-{day:02d}", " BC"
    return f"{year:04d}-{month:02d}-{day:02d}", ""


def date_text(days: int) -> str:
    if days == DATE_POS_INFINITY:
        return "infinity"
    if days == DATE_NEG_INFINITY:
        return "-infinity"
    ymd, era = _ymd(*civil_from_days(days))
    return ymd + era


def _clock(micros: int) -> str:
    """``HH:MM:SS[.ffffff]`` of micros within a day (``24:00:00`` included)."""
    seconds, frac = divmod(micros, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    text = f"{hour:02d}:{minute:02d}:{second:02d}"
    return f"{text}.{frac:06d}" if frac else text


def _second(seconds: int, suffix: str) -> tuple[str, str]:
    """(``YYYY-MM-DD HH:MM:SS``, what follows the fraction: zone and era) of a whole second."""
    if _MIN_FAST <= seconds * 1_000_000 < _MAX_FAST:
        return (_EPOCH + timedelta(seconds=seconds)).isoformat(" "), suffix
    days, rest = divmod(seconds, 86_400)
    ymd, era = _ymd(*civil_from_days(days))
    return f"{ymd} {_clock(rest * 1_000_000)}", suffix + era


def _timestamp(tz: bool) -> Converter:
    suffix = "+00" if tz else ""
    seconds_text: dict[int, tuple[str, str]] = {}  # rows share seconds: format each once

    def convert(micros: int) -> str:
        if micros == TS_POS_INFINITY:
            return "infinity"
        if micros == TS_NEG_INFINITY:
            return "-infinity"
        seconds, frac = divmod(micros, 1_000_000)
        found = seconds_text.get(seconds)
        if found is None:
            if len(seconds_text) >= 100_000:
                seconds_text.clear()
            found = seconds_text[seconds] = _second(seconds, suffix)
        head, tail = found
        return f"{head}.{frac:06d}{tail}" if frac else head + tail

    return convert


def time_text(micros: int) -> str:
    return _clock(micros)


def interval_text(v: Mapping[str, int]) -> str:
    months, days, micros = v["months"], v["days"], v["microseconds"]
    if v == INTERVAL_POS_INFINITY:
        return "infinity"
    if v == INTERVAL_NEG_INFINITY:
        return "-infinity"
    sign = "-" if micros < 0 else ""
    seconds, frac = divmod(abs(micros), 1_000_000)
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    secs = f"{second}.{frac:06d}".rstrip("0").rstrip(".") if frac else str(second)
    return f"P{months}M{days}DT{sign}{hours}H{sign}{minute}M{sign}{secs}S"


def _quote(text: str) -> str:
    """A double-quoted element of an array, range or hstore literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _array_quoter(delim: str) -> Converter:
    """An array element as PostgreSQL's array output writes it: quoted only when it must be
    (empty, ``NULL`` in any case, or holding a quote, backslash, brace, the delimiter or white
    space), so that an element kept as text (an array of a domain over an array) reads the same
    as in the source."""
    special = re.compile(r'[{}"\\ \t\n\r\v\f' + re.escape(delim) + "]")

    def quote(text: str) -> str:
        if not text or special.search(text) or text.upper() == "NULL":
            return _quote(text)
        return text

    return quote


def _array(element: Converter, delim: str, nesting: int) -> Converter:
    """An array of ``nesting`` declared dimensions, given as nested lists (the declared
    branch) or as the general array record (any dimensions, any lower bounds)."""

    quote = _array_quoter(delim)

    def braces(value: list, depth: int) -> str:
        parts = []
        for item in value:
            if item is None:
                parts.append("NULL")
            elif depth > 1:
                parts.append(braces(item, depth - 1))
            else:
                parts.append(quote(element(item)))
        return "{" + delim.join(parts) + "}"

    def convert(value: list | Mapping[str, Any]) -> str:
        if isinstance(value, list):
            return braces(value, nesting)
        dims = value["dimensions"]
        text = braces(nested_elements(value), len(dims)) if dims else "{}"
        if any(d["lower"] != 1 for d in dims):
            text = "".join(f"[{d['lower']}:{d['lower'] + d['length'] - 1}]" for d in dims) \
                + "=" + text
        return text

    return convert


def _range(bound: Converter) -> Converter:
    def convert(v: Mapping[str, Any]) -> str:
        if v["empty"]:
            return "empty"
        lower = "" if v["lower"] is None else _quote(bound(v["lower"]))
        upper = "" if v["upper"] is None else _quote(bound(v["upper"]))
        return ("[" if v["lower_inclusive"] else "(") + lower + "," + upper + (
            "]" if v["upper_inclusive"] else ")")

    return convert


def _hstore(v: Mapping[str, str | None]) -> str:
    return ", ".join(
        f"{_quote(k)}=>{'NULL' if x is None else _quote(x)}" for k, x in v.items()
    )


def _json_map(v: Mapping[str, str | None]) -> str:
    return json.dumps(v, ensure_ascii=False)


def _str(v: Any) -> str:
    return v if isinstance(v, str) else str(v)


def text_converter(avro_type: Any, named: Mapping[str, dict], pg_type: str = "",
                   target_type: str = "") -> Converter:
    """``value -> PostgreSQL text`` for a field of ``avro_type`` (None is never passed).
    ``pg_type`` is the source's declared type (for the array delimiter of ``box[]``),
    ``target_type`` the column's type in the target (a map becomes JSON unless it is hstore)."""
    branches = array_branches(avro_type, named)
    if branches is not None:  # an array column: the declared shape, or the general record
        return text_converter(branches[0], named, pg_type, target_type)
    t = _resolve(avro_type, named)
    if isinstance(t, list):
        return _decimal
    if isinstance(t, str):
        return {"boolean": _bool, "int": str, "long": str, "float": _float, "double": _float,
                "bytes": _bytes, "string": _str}.get(t, _str)
    logical = t.get("logicalType")
    if logical == "decimal":
        return _decimal
    if logical == "date":
        return date_text
    if logical == "timestamp-micros":
        return _timestamp(True)
    if logical == "local-timestamp-micros":
        return _timestamp(False)
    if logical == "time-micros":
        return time_text
    kind = t.get("type")
    if kind == "array":
        # Non-null array items are further dimensions, nullable items the element (sub-arrays
        # are never null in PostgreSQL); non-null range items make a multirange.
        items, nesting = t["items"], 1
        inner = named.get(items, items) if isinstance(items, str) else items
        while isinstance(inner, dict) and inner.get("type") == "array":
            items, nesting = inner["items"], nesting + 1
            inner = named.get(items, items) if isinstance(items, str) else items
        if _is_range(inner):  # a multirange
            one = _range(_bound_converter(inner, named))
            return lambda v: "{" + ",".join(one(r) for r in v) + "}"
        element_pg = pg_type.strip()
        while element_pg.endswith("[]"):
            element_pg = element_pg.removesuffix("[]").strip()
        delim = ";" if element_pg == "box" else ","
        return _array(text_converter(items, named, element_pg, ""), delim, nesting)
    if kind == "map":
        return _json_map if target_type.startswith("json") else _hstore
    if _is_interval(t):
        return interval_text
    if _is_range(t):
        return _range(_bound_converter(t, named))
    if kind in ("boolean", "int", "long", "float", "double", "bytes", "string"):
        return text_converter(kind, named)
    return _str


def _bound_converter(range_schema: dict, named: Mapping[str, dict]) -> Converter:
    return text_converter(range_schema["fields"][1]["type"], named)


# --------------------------------------------------------------------------- COPY

_COPY_SPECIALS = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def copy_escape(text: str) -> str:
    """``text`` escaped for COPY's text format (backslash, tab, newline, carriage return)."""
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_COPY_SPECIALS)
    return text
