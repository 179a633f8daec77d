"""Avro (as the capture writes it, see docs/type-mapping.md) → Arrow types, the types Delta
stores, and the rows of decoded changes → Arrow tables.

Values arrive decoded *without* date/time logical types (dates are days, timestamps and times
microseconds, as ints), so most of them go into Arrow as they are. Three need a hand:

- ±infinity dates and timestamps (the int extremes) become the ends of Delta's range
  (0001-01-01 and 9999-12-31 [23:59:59.999999]), the warehouse convention for "no end"; a finite
  value outside that range (a BC date, year 10000) is refused (:class:`OutOfRange`).
- a ``numeric(p,s)`` NaN (the union's string branch) has no decimal: refused.
- a union of several non-null types other than decimal-or-NaN becomes a JSON string.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from schemas.avro_names import resolve_names
from schemas.pgtypes import array_branches, nested_elements

DATE_MIN, DATE_MAX = -719162, 2932896  # 0001-01-01, 9999-12-31 in days since 1970-01-01
TS_MIN, TS_MAX = DATE_MIN * 86_400_000_000, (DATE_MAX + 1) * 86_400_000_000 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
TIMESTAMP_TZ = pa.timestamp("us", tz="UTC")
TIMESTAMP_NTZ = pa.timestamp("us")

Converter = Callable[[Any], Any]


class OutOfRange(ValueError):
    """A value Delta cannot hold: the change carrying it is refused."""


def _clamp(lo: int, hi: int, neg_inf: int, pos_inf: int) -> Converter:
    def convert(v: int) -> int:
        if v == pos_inf:
            return hi
        if v == neg_inf:
            return lo
        if not lo <= v <= hi:
            raise OutOfRange(f"{v} is outside Delta's date/time range")
        return v

    return convert


def _clamp_array(lo: int, hi: int, neg_inf: int, pos_inf: int, arrow: pa.DataType):
    """The column form of :func:`_clamp`: ints in, ``arrow`` out, in Arrow compute."""

    source = pa.int32() if arrow == pa.date32() else pa.int64()

    def convert(ints: pa.Array) -> pa.Array:
        ints = pc.if_else(pc.equal(ints, pos_inf), hi, pc.if_else(pc.equal(ints, neg_inf),
                                                                   lo, ints))
        low, high = pc.min_max(ints).values()
        if (low.is_valid and low.as_py() < lo) or (high.is_valid and high.as_py() > hi):
            raise OutOfRange("a value outside Delta's date/time range")
        return ints.cast(source).cast(arrow)

    return convert


def _json(v: Any) -> str:
    return json.dumps(v, default=str, sort_keys=True)


class Mapped:
    """An Avro type's Arrow type and the converter its values need (None: as they are);
    ``column``, where set, converts a whole column at once from ``source`` values."""

    __slots__ = ("arrow", "column", "convert", "source")

    def __init__(self, arrow: pa.DataType, convert: Converter | None = None,
                 column: Callable[[pa.Array], pa.Array] | None = None,
                 source: pa.DataType | None = None):
        self.arrow = arrow
        self.convert = convert
        self.column = column
        self.source = source

    def array(self, values: list) -> pa.Array:
        if self.column is not None:
            return self.column(pa.array(values, type=self.source))
        if self.convert is not None:
            convert = self.convert
            values = [None if v is None else convert(v) for v in values]
        return pa.array(values, type=self.arrow)


def mapped(avro: Any, named: dict[str, Any] | None = None) -> Mapped:
    """The Arrow type (and value converter) of an Avro type; references to named types (full
    names) resolve through ``named`` (see :func:`schemas.avro_names.resolve_names`)."""
    named = {} if named is None else named
    if isinstance(avro, str):
        if avro in named:
            return mapped(named[avro], named)
        return _PRIMITIVES.get(avro) or Mapped(pa.string(), _json)
    if isinstance(avro, list):
        arrays = array_branches(avro, named)
        if arrays is not None:
            return _array_column(arrays[0], named)
        branches = [b for b in avro if b != "null"]
        if len(branches) == 1:
            return mapped(branches[0], named)
        first = mapped(branches[0], named) if branches else Mapped(pa.string())
        if (pa.types.is_decimal(first.arrow) and len(branches) == 2
                and branches[1] == "string"):
            return first  # decimal, or "NaN": refused by the decimal converter
        return Mapped(pa.string(), _json)
    kind, logical = avro.get("type"), avro.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(avro["precision"]), int(avro.get("scale", 0))
        arrow = pa.decimal128(precision, scale) if precision <= 38 else \
            pa.decimal256(precision, scale)
        return Mapped(arrow)  # a "NaN" (the string branch) fails to convert: refused
    if kind == "int" and logical == "date":
        return Mapped(pa.date32(), _clamp(DATE_MIN, DATE_MAX, INT_MIN, INT_MAX),
                      _clamp_array(DATE_MIN, DATE_MAX, INT_MIN, INT_MAX, pa.date32()),
                      pa.int32())
    if kind == "long" and logical in ("timestamp-micros", "local-timestamp-micros"):
        arrow = TIMESTAMP_TZ if logical == "timestamp-micros" else TIMESTAMP_NTZ
        return Mapped(arrow, _clamp(TS_MIN, TS_MAX, LONG_MIN, LONG_MAX),
                      _clamp_array(TS_MIN, TS_MAX, LONG_MIN, LONG_MAX, arrow), pa.int64())
    if kind == "record":
        fields = [(f["name"], mapped(f["type"], named)) for f in avro["fields"]]
        arrow = pa.struct([(name, m.arrow) for name, m in fields])
        inner = [(name, m.convert) for name, m in fields if m.convert is not None]
        if not inner:
            return Mapped(arrow)

        def record(v: dict) -> dict:
            v = dict(v)
            for name, convert in inner:
                if v.get(name) is not None:
                    v[name] = convert(v[name])
            return v

        return Mapped(arrow, record)
    if kind == "array":
        item = mapped(avro["items"], named)
        if item.convert is None:
            return Mapped(pa.list_(item.arrow))
        each = item.convert
        return Mapped(pa.list_(item.arrow),
                      lambda v: [None if x is None else each(x) for x in v])
    if kind == "map":
        item = mapped(avro["values"], named)
        if item.convert is None:
            return Mapped(pa.map_(pa.string(), item.arrow))
        each = item.convert
        return Mapped(pa.map_(pa.string(), item.arrow),
                      lambda v: {k: None if x is None else each(x) for k, x in v.items()})
    if kind == "enum":
        return Mapped(pa.string())
    if kind == "fixed":
        return Mapped(pa.binary())
    return mapped(kind, named)  # {"type": "long", "logicalType": "time-micros"} and the like


def _array_column(declared: dict, named: dict[str, Any]) -> Mapped:
    """An array column: a list of its declared dimensions. A value of another shape (the
    general array record) fits when it has as many dimensions (its lower bounds dropped, as
    Delta lists have none); one with more or fewer is refused (:class:`OutOfRange`)."""
    inner = mapped(declared, named)
    depth, items = 1, declared["items"]
    while isinstance(items, dict) and items.get("type") == "array":
        depth, items = depth + 1, items["items"]
    each = inner.convert

    def convert(v: Any) -> Any:
        if isinstance(v, dict):
            if len(v["dimensions"]) != depth:
                raise OutOfRange(f"an array of {len(v['dimensions'])} dimension(s) in a "
                                 f"column of {depth}: Delta lists have a fixed depth")
            v = nested_elements(v)
        return v if each is None else each(v)

    return Mapped(inner.arrow, convert)


_PRIMITIVES = {
    "boolean": Mapped(pa.bool_()),
    "int": Mapped(pa.int32()),
    "long": Mapped(pa.int64()),
    "float": Mapped(pa.float32()),
    "double": Mapped(pa.float64()),
    "bytes": Mapped(pa.binary()),
    "string": Mapped(pa.string()),
}

INVALID_IN_DELTA_NAMES = str.maketrans({c: "_" for c in " ,;{}()\n\t="})


def column_name(field: Mapping[str, Any]) -> str:
    """A field's Delta column: its ``pg.name`` (the source column's name), with the characters
    Delta refuses in column names (without column mapping) replaced by ``_``."""
    return str(field.get("pg.name", field["name"])).translate(INVALID_IN_DELTA_NAMES)


class RecordLayout:
    """How the rows of one record schema become Arrow columns: ``(field, column, Mapped)``."""

    def __init__(self, schema: Mapping[str, Any], names: Mapping[str, str] | None = None):
        schema, named = resolve_names(schema)
        self.fields = [
            (f["name"], (names or {}).get(f["name"]) or column_name(f), mapped(f["type"], named))
            for f in schema["fields"]
        ]

    def table(self, rows: list[dict], extra: Mapping[str, pa.Array] | None = None) -> pa.Table:
        """The rows as an Arrow table; ValueError/TypeError/ArrowException (``bad_row`` finds
        the row) when a value does not fit."""
        arrays, names = [], []
        for field, column, m in self.fields:
            arrays.append(m.array([row.get(field) for row in rows]))
            names.append(column)
        for column, array in (extra or {}).items():
            arrays.append(array)
            names.append(column)
        return pa.Table.from_arrays(arrays, names=names)

    def bad_row(self, rows: list[dict]) -> tuple[int, str] | None:
        """The index of the first row that does not convert, and why."""
        for i, row in enumerate(rows):
            for field, column, m in self.fields:
                v = row.get(field)
                try:
                    if v is not None and m.convert is not None:
                        v = m.convert(v)
                    pa.array([v], type=m.arrow)
                except (ValueError, TypeError, ArithmeticError, pa.ArrowException) as exc:
                    return i, f"column {column}: {exc}"
        return None
