"""Avro fields as search fields: the mapping of each column and how its decoded value becomes
JSON.

Values arrive decoded without date/time logical types (see materializers.core.changes): dates
are days since 1970-01-01, timestamps and times microseconds, decimals ``Decimal``.
docs/search.md has the table of what each becomes.

Numbers and dates are mapped with ``ignore_malformed``: a value the field cannot index (NaN,
``infinity`` of a real column) stays in ``_source`` without failing its document.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from schemas.pgtypes import array_branches

Converter = Callable[[Any], Any]
Named = dict[str, Any]  # full name -> named Avro type: see schemas.avro_names.resolve_names

DATE_FORMAT = "strict_date_optional_time||epoch_millis"
TEXT_TYPES = {"text", "character varying", "citext", "xml", "tsvector"}
JSON_TYPES = {"json", "jsonb"}
EPOCH = dt.date(1970, 1, 1)
EPOCH_ORDINAL = EPOCH.toordinal()
MIN_ORDINAL, MAX_ORDINAL = dt.date.min.toordinal(), dt.date.max.toordinal()
DAY_MICROS = 86_400_000_000
KEYWORD = {"type": "keyword", "ignore_above": 8191}  # Lucene refuses terms over 32766 bytes


def base_pg_type(pg_type: str) -> str:
    """``character varying(20)[]`` → ``character varying``; ``public.mood`` → ``mood``."""
    base = pg_type.strip().removesuffix("[]")
    while base.endswith("[]"):
        base = base.removesuffix("[]")
    base = base.split("(", 1)[0].strip()
    return base.rsplit(".", 1)[-1].strip('"')


def field_shape(avro: Any, pg_type: str, named: Named, flattened: str = "flattened"
                ) -> tuple[dict[str, Any], Converter | None]:
    """``(mapping, converter)`` of a field: its search mapping and the function from the decoded
    value to JSON (None: the value is JSON already). ``flattened``: the cluster's name of the
    flattened field type."""
    arrays = array_branches(avro, named)
    if arrays is not None:
        return _array_field(arrays[0], pg_type, named, flattened)
    branches = [b for b in (avro if isinstance(avro, list) else [avro]) if b != "null"]
    if not branches:
        return dict(KEYWORD), None
    shapes = [_shape(b, pg_type, named, flattened) for b in branches]
    mapping, convert = shapes[0]
    if len(shapes) == 1:
        return mapping, convert
    # numeric(p,s): a decimal, or the string branch for NaN; the first branch maps the field
    converters = [c for _, c in shapes if c is not None]
    if not converters:
        return mapping, None

    def union(value: Any) -> Any:
        if isinstance(value, str):
            return value
        return _first_that_fits(converters, value)

    return mapping, union


def _array_field(declared: dict, pg_type: str, named: Named, flattened: str
                 ) -> tuple[dict[str, Any], Converter | None]:
    """An array column: mapped as its declared shape; a value of another shape (the general
    array record) is indexed as its elements, flat (search arrays are flat anyway)."""
    mapping, convert = field_shape(declared, pg_type, named, flattened)
    items = declared["items"]
    while isinstance(items, dict) and items.get("type") == "array":
        items = items["items"]
    _, leaf = field_shape(items, pg_type, named, flattened)

    def array(value: Any) -> Any:
        if isinstance(value, dict):
            elements = value["elements"]
            return elements if leaf is None else [
                None if v is None else leaf(v) for v in elements]
        return value if convert is None else convert(value)

    return mapping, array


def _first_that_fits(converters: list[Converter], value: Any) -> Any:
    for convert in converters:
        try:
            return convert(value)
        except (TypeError, ValueError, AttributeError):
            continue
    return value


def _shape(avro: Any, pg_type: str, named: Named, flattened: str
           ) -> tuple[dict[str, Any], Converter | None]:
    if isinstance(avro, str):
        if avro in named:
            return _shape(named[avro], pg_type, named, flattened)
        return _primitive(avro, None, pg_type, flattened)
    kind = avro.get("type")
    if isinstance(kind, dict | list):
        return field_shape(kind, pg_type, named, flattened)
    if kind == "record":
        properties: dict[str, Any] = {}
        converters: list[tuple[str, str, Converter | None]] = []
        for f in avro["fields"]:
            mapping, convert = field_shape(f["type"], f.get("pg.type", ""), named, flattened)
            out = f.get("pg.name", f["name"])
            properties[out] = mapping
            converters.append((f["name"], out, convert))
        return {"properties": properties}, record_converter(converters)
    if kind == "array":
        mapping, convert = field_shape(avro["items"], pg_type, named, flattened)
        if convert is None:
            return mapping, None
        return mapping, lambda items: [None if v is None else convert(v) for v in items]
    if kind == "map":
        return {"type": flattened}, None  # hstore: string values
    if kind == "enum":
        return dict(KEYWORD), None
    if kind == "fixed":
        return {"type": "binary"}, _base64
    return _primitive(kind, avro, pg_type, flattened)


def _primitive(kind: str, avro: dict | None, pg_type: str, flattened: str
               ) -> tuple[dict[str, Any], Converter | None]:
    logical = avro.get("logicalType") if avro else None
    if logical == "date":
        return _date_mapping(), date_json
    if logical in ("timestamp-micros", "local-timestamp-micros"):
        return _date_mapping(), timestamp_json if logical == "timestamp-micros" else local_json
    if logical == "time-micros":
        return dict(KEYWORD), time_json
    if logical == "decimal":
        precision = int(avro.get("precision", 0))
        scale = int(avro.get("scale", 0))
        if 0 < precision <= 15:  # a double holds 15 significant digits exactly
            return {"type": "scaled_float", "scaling_factor": 10 ** scale,
                    "ignore_malformed": True}, decimal_number
        return {"type": "double", "ignore_malformed": True}, str
    if kind == "boolean":
        return {"type": "boolean"}, None
    if kind in ("int", "long"):  # long for both: tables sharing an index share field types
        return {"type": "long"}, None
    if kind in ("float", "double"):
        return {"type": kind, "ignore_malformed": True}, float_json
    if kind == "bytes":
        return {"type": "binary"}, _base64
    if kind == "string":
        base = base_pg_type(pg_type)
        if base in JSON_TYPES:
            return {"type": flattened}, json_document
        if base in TEXT_TYPES:
            return {"type": "text", "fields": {"keyword": {"type": "keyword",
                                                           "ignore_above": 256}}}, None
        if base == "numeric":
            return {"type": "double", "ignore_malformed": True}, None
        return dict(KEYWORD), None
    return dict(KEYWORD), None


def _date_mapping() -> dict[str, Any]:
    return {"type": "date", "format": DATE_FORMAT, "ignore_malformed": True}


def record_converter(fields: list[tuple[str, str, Converter | None]]) -> Converter:
    """``record -> dict`` under the output names, each value converted."""

    def convert(record: dict[str, Any]) -> dict[str, Any]:
        out = {}
        get = record.get
        for name, target, conv in fields:
            value = get(name)
            out[target] = value if value is None or conv is None else conv(value)
        return out

    return convert


# -- values -------------------------------------------------------------------------------


_DAY_TEXT: dict[int, str] = {}  # days since 1970 -> "YYYY-MM-DD": rows share their days


def _day_text(days: int) -> str | None:
    """``YYYY-MM-DD`` of a day in years 1–9999, else None."""
    text = _DAY_TEXT.get(days)
    if text is None:
        ordinal = EPOCH_ORDINAL + days
        if not MIN_ORDINAL <= ordinal <= MAX_ORDINAL:
            return None
        if len(_DAY_TEXT) > 100_000:
            _DAY_TEXT.clear()
        text = _DAY_TEXT[days] = dt.date.fromordinal(ordinal).isoformat()
    return text


def date_json(days: int) -> Any:
    text = _day_text(days)
    return text if text is not None else days * 86_400_000  # epoch milliseconds


def _micros_iso(micros: int, suffix: str) -> Any:
    days, rest = divmod(micros, DAY_MICROS)
    day = _day_text(days)
    if day is None:
        return micros // 1000  # outside years 1–9999 (and ±infinity): epoch milliseconds
    seconds, us = divmod(rest, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{day}T{hours:02d}:{minutes:02d}:{seconds:02d}.{us:06d}{suffix}"


def timestamp_json(micros: int) -> Any:
    return _micros_iso(micros, "Z")


def local_json(micros: int) -> Any:
    return _micros_iso(micros, "")


def time_json(micros: int) -> str:
    seconds, us = divmod(micros, 1_000_000)
    hours, seconds = divmod(seconds, 3600)
    minutes, seconds = divmod(seconds, 60)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}.{us:06d}"


def decimal_number(value: Decimal) -> Any:
    """A decimal of at most 15 significant digits as a JSON number (the float has the same
    digits: ``Decimal(repr(x))`` gives it back, trailing zeros aside); NaN as a string."""
    return float(value) if value.is_finite() else str(value)


def float_json(value: float) -> Any:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


JSON_VALUE = "value"  # the key a JSON document that is not an object is indexed under


def json_document(text: str) -> Any:
    """A json/jsonb column's document, parsed (numbers with a fraction as floats). The flattened
    types (``flattened``, ``flat_object``) index objects only, an array of objects as several:
    any other JSON (a scalar, an array holding one) would fail its whole document, so it is
    indexed as the object ``{"value": document}``."""
    value = json.loads(text)
    if value is None or isinstance(value, dict) or (
            isinstance(value, list) and all(isinstance(item, dict) for item in value)):
        return value
    return {JSON_VALUE: value}


def _base64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def plain_json(value: Any) -> Any:
    """Any decoded value as JSON without its schema (for keys): Decimal as a string, bytes
    base64, containers element by element."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return _base64(value)
    if isinstance(value, float):
        return float_json(value)
    if isinstance(value, dict):
        return {k: plain_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_json(v) for v in value]
    return value
