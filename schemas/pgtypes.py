"""PostgreSQL column types → Avro types, with converters from PostgreSQL's text output.

Values arrive as the type's text output (what pgoutput sends in text mode and what
``COPY ... TO STDOUT`` sends once COPY's own escaping is undone), produced under
:data:`SESSION_SETTINGS`, or ``None`` for SQL NULL. :func:`codec_for` builds, once per column, a
:class:`Codec` whose ``schema`` is the Avro type of a non-null value and whose ``from_text`` turns
the text into the Python value fastavro writes for that schema.

The mapping is lossless: every value PostgreSQL can output maps to exactly one Avro value and
back, and a value that cannot be represented raises :class:`TypeConversionError` instead of being
altered. ``docs/type-mapping.md`` is the user-facing table; this module is pure (no database).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from schemas.avro_names import full_name, resolve_names

__all__ = [
    "ARRAY_DIMENSION_SCHEMA",
    "AVRO_NAMESPACE",
    "DATE_NEG_INFINITY",
    "DATE_POS_INFINITY",
    "INTERVAL_NEG_INFINITY",
    "INTERVAL_POS_INFINITY",
    "SESSION_SETTINGS",
    "TS_NEG_INFINITY",
    "TS_POS_INFINITY",
    "Codec",
    "Column",
    "PgType",
    "TypeConversionError",
    "array_branches",
    "avro_name",
    "codec_for",
    "dedupe_named_types",
    "general_array_schema",
    "is_general_array",
    "libpq_options",
    "nested_elements",
    "nullable",
    "numeric_precision_scale",
    "session_statements",
    "text_parser",
]

#: Settings every capture connection uses, so that text output has exactly one format.
SESSION_SETTINGS: dict[str, str] = {
    "DateStyle": "ISO",
    "IntervalStyle": "iso_8601",
    "TimeZone": "UTC",
    "extra_float_digits": "3",
    "bytea_output": "hex",
    "lc_monetary": "C",
}


def session_statements() -> list[str]:
    """``SET`` statements applying :data:`SESSION_SETTINGS` on an open connection."""
    return [f"SET {name} TO '{value}'" for name, value in SESSION_SETTINGS.items()]


def libpq_options() -> str:
    """:data:`SESSION_SETTINGS` as a libpq ``options`` value (``-c name=value ...``), for
    connections where running ``SET`` first is awkward (e.g. replication connections)."""
    return " ".join(f"-c {name}={value}" for name, value in SESSION_SETTINGS.items())


INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

#: ``date 'infinity'`` / ``'-infinity'`` as Avro ``date`` (days): the int's extremes.
DATE_POS_INFINITY, DATE_NEG_INFINITY = INT_MAX, INT_MIN
#: timestamp(tz) ``'infinity'`` / ``'-infinity'`` as micros: the long's extremes.
TS_POS_INFINITY, TS_NEG_INFINITY = LONG_MAX, LONG_MIN
#: PostgreSQL 17's infinite intervals, as PostgreSQL stores them (every field at its extreme).
INTERVAL_POS_INFINITY = {"months": INT_MAX, "days": INT_MAX, "microseconds": LONG_MAX}
INTERVAL_NEG_INFINITY = {"months": INT_MIN, "days": INT_MIN, "microseconds": LONG_MIN}

#: Namespace of the named Avro types this module defines (Interval, range records).
AVRO_NAMESPACE = "bottler.pg"


# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class PgType:
    """A row of ``pg_type``, with what the mapping needs of the types it refers to.

    ``element`` is set for true array types only (not for ``int2vector``-like types);
    ``base`` for domains; ``subtype`` for ranges (the bound type) and for multiranges (the
    *range* type, whose own ``subtype`` is the bound type). ``typmod``, ``ndims`` and
    ``delimiter`` are ``pg_type.typtypmod``, ``typndims`` (both only meaningful for domains) and
    ``typdelim`` (the array delimiter; empty means the default: ``;`` for ``box``, else ``,``).
    """

    oid: int
    name: str
    schema: str
    kind: str
    category: str
    element: PgType | None = None
    base: PgType | None = None
    subtype: PgType | None = None
    labels: tuple[str, ...] = ()
    typmod: int = -1
    ndims: int = 0
    delimiter: str = ""

    @property
    def array_delimiter(self) -> str:
        if self.delimiter:
            return self.delimiter
        return ";" if self.name == "box" and self.schema == "pg_catalog" else ","


@dataclass(frozen=True)
class Column:
    """A live table column (``pg_attribute``): ``ndims`` is ``attndims``, ``formatted`` is
    ``format_type(atttypid, atttypmod)``, ``generated`` is true for generated columns."""

    name: str
    type: PgType
    typmod: int = -1
    not_null: bool = False
    ndims: int = 0
    formatted: str = ""
    generated: bool = False
    # The text of the value that rows older than the column read (ADD COLUMN with a non-volatile
    # default: pg_attribute.attmissingval). Those rows never pass through the WAL again.
    missing: str | None = None


class TypeConversionError(ValueError):
    """A text value that does not convert to its column's Avro type."""

    def __init__(self, type_name: str, value: object, reason: str = "", column: str | None = None):
        self.type_name = type_name
        self.value = value
        self.reason = reason
        self.column = column
        where = f" in column {column!r}" if column is not None else ""
        message = f"cannot convert {type_name} value {_shorten(value)}{where}"
        super().__init__(f"{message}: {reason}" if reason else message)


def _shorten(value: object, limit: int = 60) -> str:
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 5]}...' ({len(str(value))} chars)"


# --------------------------------------------------------------------------- codec


class Codec:
    """How one column's values map to Avro.

    ``schema``: the Avro type of a non-null value (a str, dict or list; named types fully
    defined, each once). ``parse``: the raw converter, text → Avro value, as fast as it gets; it
    raises ``ValueError`` (or another exception) on bad input. ``from_text``: the same
    conversion, raising :class:`TypeConversionError` naming the type and the value.
    ``type_name``: the PostgreSQL type the codec was built for (for messages).
    """

    __slots__ = ("schema", "parse", "type_name")

    def __init__(self, schema: Any, parse: Callable[[str], Any], type_name: str):
        # a private copy: the module's schema constants are never handed out to be mutated
        self.schema = copy.deepcopy(dedupe_named_types(schema, set()))
        self.parse = parse
        self.type_name = type_name

    def from_text(self, text: str | None) -> Any:
        if text is None:
            return None
        try:
            return self.parse(text)
        except TypeConversionError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure is a bad value for this type
            reason = str(exc) or type(exc).__name__
            raise TypeConversionError(self.type_name, text, reason) from None

    @property
    def named_types(self) -> list[str]:
        """Full names of the named Avro types the schema defines, in definition order."""
        return list(resolve_names(self.schema)[1])

    def schema_in(self, defined: set[str]) -> Any:
        """The schema for use inside a larger schema where the named types in ``defined`` are
        already defined: those become references by full name, the others are defined here
        and added to ``defined``."""
        return dedupe_named_types(self.schema, defined)

    def __repr__(self) -> str:
        return f"Codec({self.type_name}, {self.schema!r})"


_NAMED = ("record", "enum", "fixed")


def dedupe_named_types(schema: Any, defined: set[str]) -> Any:
    """``schema`` with every named type (record, enum, fixed) defined once: a type whose full
    name is in ``defined`` (or was defined earlier in the walk) is replaced by its full name.
    ``defined`` is updated. The named types here always carry an explicit namespace."""
    if isinstance(schema, list):
        return [dedupe_named_types(branch, defined) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind in _NAMED and "name" in schema:
        full = full_name(schema["name"], schema.get("namespace"))
        if full in defined:
            return full
        defined.add(full)
        if kind == "record":
            fields = schema["fields"]
            return {
                **schema,
                "fields": [{**f, "type": dedupe_named_types(f["type"], defined)} for f in fields],
            }
        return schema
    if kind == "array":
        return {**schema, "items": dedupe_named_types(schema["items"], defined)}
    if kind == "map":
        return {**schema, "values": dedupe_named_types(schema["values"], defined)}
    if isinstance(kind, dict | list):
        return {**schema, "type": dedupe_named_types(kind, defined)}
    return schema


def nullable(schema: Any) -> list:
    """``["null", schema]``, flattened when ``schema`` is itself a union (Avro forbids nesting)."""
    if isinstance(schema, list):
        return schema if "null" in schema else ["null", *schema]
    return ["null", schema]


_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")


def avro_name(name: str, stable: bool = False) -> str:
    """``name`` made a valid Avro name: invalid characters become ``_``, a leading digit (or an
    empty name) gets a ``_`` prefix. With ``stable``, a name that had to change also gets a short
    hash of the original, so that distinct originals stay distinct."""
    out = _INVALID_NAME_CHARS.sub("_", name)
    if not out or out[0].isdigit():
        out = "_" + out
    if stable and out != name:
        out = f"{out}_{short_hash(name)}"
    return out


def short_hash(text: str, length: int = 6) -> str:
    """A short stable hash of ``text`` (hex of its SHA-1)."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _type_namespace(pg: PgType) -> str:
    if pg.schema == "pg_catalog":
        return AVRO_NAMESPACE
    return f"{AVRO_NAMESPACE}.{avro_name(pg.schema, stable=True)}"


# --------------------------------------------------------------------------- scalars


def _ident(text: str) -> str:
    return text


_BOOL = {"t": True, "f": False, "true": True, "false": False}


def _parse_bool(text: str) -> bool:
    return _BOOL[text]


_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")


def _f32_from_bits(bits: int) -> float:
    return _F32.unpack(_U32.pack(bits))[0]


def _parse_float4(text: str) -> float:
    """float4 text → the exact float32 value (as a Python float).

    ``float(text)`` rounds to a double; rounding that to float32 again is correct except when the
    double lands exactly on the midpoint between two float32 values (double rounding): then
    the decimal text decides, exactly."""
    d = float(text)
    f = _F32.unpack(_F32.pack(d))[0]
    if f == d or d != d:
        return f
    bits = _U32.unpack(_F32.pack(f))[0]
    # The float32 neighbour of f on d's side (away from or towards zero by magnitude).
    toward_larger_magnitude = abs(d) > abs(f)
    other_bits = bits + 1 if toward_larger_magnitude else bits - 1
    if f == 0.0:  # d is tiny: the neighbour is the smallest subnormal with d's sign
        other_bits = 1 | (0x80000000 if d < 0 else 0)
    other = _f32_from_bits(other_bits & 0xFFFFFFFF)
    midpoint = (f + other) / 2  # exact: float32 midpoints are doubles
    if d != midpoint:
        return f
    exact, mid = Decimal(text), Decimal(midpoint)
    if exact == mid:
        return f  # a true tie: round half to even, as struct did
    closer_to_other = (exact > mid) == (other > f)
    return other if closer_to_other else f


def _parse_decimal_or_special(text: str) -> Decimal | str:
    # "NaN", "Infinity", "-Infinity" go to the string branch of the union, as text.
    return text if text[-1] in "Ny" else Decimal(text)


_MONEY_NOISE = re.compile(r"[^0-9.]")


def _parse_money(text: str) -> Decimal:
    negative = text[0] == "-" or text[0] == "("
    digits = _MONEY_NOISE.sub("", text)
    if not digits or text.count(".") > 1:
        raise ValueError("not a money amount")
    value = Decimal(digits)
    return -value if negative else value


_OCTAL_ESCAPE = re.compile(rb"\\([0-7]{3})|\\\\")


def _parse_bytea(text: str) -> bytes:
    if text[:2] == "\\x":
        return bytes.fromhex(text[2:])
    # bytea_output = escape: printable bytes as is, "\\" for a backslash, "\ooo" otherwise.
    raw = text.encode("latin-1") if text.isascii() else text.encode("utf-8")
    return _OCTAL_ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]) if m.group(1) else b"\\", raw)


# --------------------------------------------------------------------------- dates and times


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (astronomical year: 1 BC is 0)."""
    if month <= 2:
        year -= 1
        mp = month + 9
    else:
        mp = month - 3
    era = year // 400
    yoe = year - era * 400
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """The inverse of :func:`days_from_civil`: (astronomical year, month, day)."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


_date_fromiso = date.fromisoformat
_DATE_INF = {"infinity": DATE_POS_INFINITY, "-infinity": DATE_NEG_INFINITY}
_DAY_MICROS = 86_400_000_000


_MONTH_DAYS = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _date_days(text: str, end: int, bc: bool = False) -> int:
    """Days of the ``YYYY-MM-DD`` ending at ``end`` (the year may have more than 4 digits;
    with ``bc``, year N is N BC, astronomical year 1 - N)."""
    if text[end - 3] != "-" or text[end - 6] != "-" or not text[: end - 6].isdigit():
        raise ValueError("not an ISO date")
    year = int(text[: end - 6])
    month = int(text[end - 5 : end - 3])
    day = int(text[end - 2 : end])
    if bc:
        year = 1 - year
    if not 1 <= month <= 12:
        raise ValueError("month out of range")
    leap = month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    if not 1 <= day <= _MONTH_DAYS[month] + leap:
        raise ValueError("day out of range")
    return days_from_civil(year, month, day)


def _parse_date(text: str) -> int:
    if len(text) == 10:
        try:
            return _date_fromiso(text).toordinal() - _EPOCH_ORDINAL
        except ValueError:
            pass
    if text[-1] == "C":
        if not text.endswith(" BC"):
            raise ValueError("not an ISO date")
        return _date_days(text, len(text) - 3, bc=True)
    if text[0] in "-i":
        return _DATE_INF[text]
    return _date_days(text, len(text))


_TS_INF = {"infinity": TS_POS_INFINITY, "-infinity": TS_NEG_INFINITY}
_TIME_RE = re.compile(
    r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?(?:([+-])(\d\d)(?::(\d\d)(?::(\d\d))?)?)?\Z"
)


def _time_micros(text: str, start: int, with_tz: bool) -> int:
    """Micros of ``HH:MM:SS[.ffffff][±HH[:MM[:SS]]]`` starting at ``start``, minus the offset."""
    end = len(text)
    if end - start == 8 and not with_tz:
        if text[start + 2] != ":" or text[start + 5] != ":":
            raise ValueError("not an ISO time")
        return (
            int(text[start : start + 2]) * 3600
            + int(text[start + 3 : start + 5]) * 60
            + int(text[start + 6 : end])
        ) * 1_000_000
    m = _TIME_RE.match(text, start)
    if m is None:
        raise ValueError("not an ISO time")
    hour, minute, second, frac, sign, oh, om, osec = m.groups()
    if (sign is not None) != with_tz:
        raise ValueError("unexpected time zone" if sign else "missing time zone")
    micros = (int(hour) * 3600 + int(minute) * 60 + int(second)) * 1_000_000
    if frac:
        micros += int(frac) * 10 ** (6 - len(frac))
    if sign:
        offset = int(oh) * 3600 + (int(om) * 60 if om else 0) + (int(osec) if osec else 0)
        micros -= offset * 1_000_000 if sign == "+" else -offset * 1_000_000
    return micros


_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MICRO = timedelta(microseconds=1)
_EPOCH_ORDINAL = 719163  # date(1970, 1, 1).toordinal()


def _timestamp_parser(with_tz: bool) -> Callable[[str], int]:
    """timestamp(tz) text → micros since 1970-01-01 (UTC). Years 1..9999 go through the C
    datetime parser; BC, years past 9999 and the infinities through the calendar arithmetic
    of :func:`days_from_civil`."""
    fromiso = datetime.fromisoformat
    epoch = _EPOCH_UTC if with_tz else _EPOCH

    def general(text: str) -> int:
        first = text[0]
        if first == "-" or first == "i":
            return _TS_INF[text]
        space = text.index(" ")
        if text[-1] == "C":
            if not text.endswith(" BC"):
                raise ValueError("not an ISO timestamp")
            days = _date_days(text, space, bc=True)
            micros = days * _DAY_MICROS + _time_micros(text[:-3], space + 1, with_tz)
        else:
            micros = _date_days(text, space) * _DAY_MICROS + _time_micros(text, space + 1, with_tz)
        if micros >= LONG_MAX or micros <= LONG_MIN:
            raise ValueError("beyond what microseconds since 1970 in an Avro long can hold")
        return micros

    def parse(text: str) -> int:
        try:
            return (fromiso(text) - epoch) // _ONE_MICRO
        except ValueError:
            return general(text)
        except TypeError:  # an offset where none belongs, or none where one should be
            reason = "missing time zone" if with_tz else "unexpected time zone"
            raise ValueError(reason) from None

    return parse


def _parse_time(text: str) -> int:
    if len(text) > 8 and text[8] != ".":
        raise ValueError("unexpected text after the time")
    micros = _time_micros(text, 0, False)
    if micros > _DAY_MICROS:
        raise ValueError("time of day out of range")
    return micros


_INTERVAL_RE = re.compile(
    r"(-)?P(?:([+-]?\d+)Y)?(?:([+-]?\d+)M)?(?:([+-]?\d+)W)?(?:([+-]?\d+)D)?"
    r"(?:T(?:([+-]?\d+)H)?(?:([+-]?\d+)M)?(?:([+-])?(\d+)(?:\.(\d{1,6}))?S)?)?\Z"
)


def _parse_interval(text: str) -> dict[str, int]:
    m = _INTERVAL_RE.match(text)
    if m is None or text.endswith("T") or text == "P" or text == "-P":
        if text == "infinity":
            return dict(INTERVAL_POS_INFINITY)
        if text == "-infinity":
            return dict(INTERVAL_NEG_INFINITY)
        raise ValueError("not an ISO 8601 interval (IntervalStyle must be iso_8601)")
    neg, years, months, weeks, days, hours, minutes, ssign, secs, frac = m.groups()
    total_months = (int(years) * 12 if years else 0) + (int(months) if months else 0)
    total_days = (int(weeks) * 7 if weeks else 0) + (int(days) if days else 0)
    micros = ((int(hours) * 3600 if hours else 0) + (int(minutes) * 60 if minutes else 0)) * 10**6
    if secs:
        s = int(secs) * 1_000_000 + (int(frac) * 10 ** (6 - len(frac)) if frac else 0)
        micros += -s if ssign == "-" else s
    if neg:
        total_months, total_days, micros = -total_months, -total_days, -micros
    if not (INT_MIN <= total_months <= INT_MAX and INT_MIN <= total_days <= INT_MAX):
        raise ValueError("months or days out of the Avro int's range")
    if not LONG_MIN <= micros <= LONG_MAX:
        raise ValueError("time part out of the Avro long's range")
    return {"months": total_months, "days": total_days, "microseconds": micros}


INTERVAL_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Interval",
    "namespace": AVRO_NAMESPACE,
    "doc": "A PostgreSQL interval: months, days and microseconds, each with its own sign.",
    "fields": [
        {"name": "months", "type": "int"},
        {"name": "days", "type": "int"},
        {"name": "microseconds", "type": "long"},
    ],
}


# --------------------------------------------------------------------------- containers

_BACKSLASH_ESCAPE = re.compile(r"\\(.)", re.S)


def _unescape(text: str) -> str:
    return _BACKSLASH_ESCAPE.sub(r"\1", text) if "\\" in text else text


#: One dimension of a general array: PostgreSQL's lower bound and the number of elements.
ARRAY_DIMENSION_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ArrayDimension",
    "namespace": AVRO_NAMESPACE,
    "doc": "One dimension of a PostgreSQL array: its lower bound and its length.",
    "fields": [{"name": "lower", "type": "int"}, {"name": "length", "type": "int"}],
}
#: Field names of the general array record (how views recognise it).
GENERAL_ARRAY_FIELDS = ["dimensions", "elements"]


def general_array_schema(name: str, namespace: str, leaf: Any) -> dict[str, Any]:
    """The record that carries an array of any shape: its dimensions (lower bound, length),
    outermost first, and its elements flat in PostgreSQL's (row-major) order; ``leaf`` is the
    nullable element type."""
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "doc": "A PostgreSQL array whose dimensions or lower bounds differ from the column's "
               "declaration: dimensions outermost first, elements flat in row-major order.",
        "fields": [
            {"name": "dimensions", "type": {"type": "array", "items": ARRAY_DIMENSION_SCHEMA}},
            {"name": "elements", "type": {"type": "array", "items": leaf}},
        ],
    }


def is_general_array(schema: Any) -> bool:
    """Whether ``schema`` (a resolved type) is a general array record."""
    return (isinstance(schema, dict) and schema.get("type") == "record"
            and [f["name"] for f in schema.get("fields", ())] == GENERAL_ARRAY_FIELDS)


def array_branches(avro_type: Any, named: dict[str, dict]) -> tuple[dict, dict] | None:
    """``(declared array schema, general array record)`` when ``avro_type`` (nullable or not,
    references resolved through ``named``) is the union an array column has, else None."""
    if not isinstance(avro_type, list):
        return None
    rest = [named.get(b, b) if isinstance(b, str) else b for b in avro_type if b != "null"]
    if len(rest) != 2:
        return None
    declared, general = rest
    if isinstance(declared, dict) and declared.get("type") == "array" \
            and is_general_array(general):
        return declared, general
    return None


def nested_elements(value: dict[str, Any]) -> list:
    """A general array as nested lists, one level per dimension (the lower bounds dropped): for
    views whose targets have no array bounds."""
    items = value["elements"]
    lengths = [d["length"] for d in value["dimensions"]]
    for length in reversed(lengths[1:]):
        items = [items[i : i + length] for i in range(0, len(items), length)]
    return items


def _array_shape(nested: list, dims: int) -> list[int]:
    """The length of each of the ``dims`` dimensions of a parsed (rectangular) array."""
    lengths, level = [], nested
    for _ in range(dims):
        lengths.append(len(level))
        level = level[0] if level else []
    return lengths


def _flatten(nested: list, dims: int) -> list:
    for _ in range(dims - 1):
        nested = [x for sub in nested for x in sub]
    return nested


#: What PostgreSQL's array input skips as white space (array_isspace): ASCII only; Python's
#: str.isspace() would also take U+0085 and other characters PostgreSQL leaves unquoted.
_PG_SPACE = " \t\n\r\v\f"
_BOUNDS = re.compile(r"\[(-?\d+):(-?\d+)\]")


def _array_parser(
    element: Callable[[str], Any], delim: str, nesting: int, type_name: str
) -> Callable[[str], list | dict]:
    """A parser of PostgreSQL's array text output for a column declaring ``nesting``
    dimensions: nested lists when the value has that many dimensions, each starting at 1 (or is
    empty), else the general array record (dimensions and flat elements)."""
    quoted = re.compile(r'"((?:[^"\\]|\\.)*)"', re.S)
    unquoted = re.compile(r'(?:[^{}"\\' + re.escape(delim) + r"]|\\.)*", re.S)
    identity = element is _ident

    def full(text: str) -> tuple[list, int]:
        """(nested lists, number of dimensions) of a general array literal."""
        n = len(text)
        root: list = []
        stack = [root]
        i = 1
        leaf_depth = 0  # the nesting depth at which elements sit: the dimensionality
        while True:
            if i >= n:
                raise ValueError("unterminated array")
            c = text[i]
            if c == "{":
                if leaf_depth and len(stack) >= leaf_depth:
                    raise ValueError("ragged array dimensions")
                child: list = []
                stack[-1].append(child)
                stack.append(child)
                i += 1
                continue
            if c == "}":
                stack.pop()
                i += 1
                if not stack:
                    break
                continue
            if c == delim or c in _PG_SPACE:
                i += 1
                continue
            depth = len(stack)
            if leaf_depth != depth:
                if leaf_depth or any(isinstance(x, list) for x in stack[-1]):
                    raise ValueError("ragged array dimensions")
                leaf_depth = depth
            if c == '"':
                m = quoted.match(text, i)
                if m is None:
                    raise ValueError("unterminated quoted array element")
                value = element(_unescape(m.group(1)))
            else:
                m = unquoted.match(text, i)
                raw = m.group(0).strip(_PG_SPACE)
                if not raw:
                    raise ValueError(f"unexpected {c!r} in array")
                if raw.upper() == "NULL":
                    value = None
                else:
                    raw = _unescape(raw)
                    value = raw if identity else element(raw)
            stack[-1].append(value)
            i = m.end()
        if text[i:].strip():
            raise ValueError("text after the array")
        if leaf_depth == 0 and root:
            raise ValueError("array of empty sub-arrays")
        return root, leaf_depth

    def general(nested: list, dims: int, lowers: list[int]) -> dict[str, Any]:
        lengths = _array_shape(nested, dims)
        elements = _flatten(nested, dims)
        total = 1
        for length in lengths:
            total *= length
        if total != len(elements):
            raise ValueError("ragged array dimensions")
        return {
            "dimensions": [{"lower": lo, "length": n} for lo, n in zip(lowers, lengths,
                                                                        strict=True)],
            "elements": elements,
        }

    def decorated(text: str) -> dict[str, Any]:
        """``[lo:hi]...={...}``: an array whose lower bounds are not all 1."""
        eq = text.index("=")
        bounds = [(int(a), int(b)) for a, b in _BOUNDS.findall(text, 0, eq)]
        if not bounds or "".join(f"[{a}:{b}]" for a, b in bounds) != text[:eq].replace(" ", ""):
            raise ValueError("bad array bounds decoration")
        body = text[eq + 1 :].strip()
        if body[:1] != "{" or body[-1:] != "}":
            raise ValueError("not an array literal")
        nested, dims = full(body)
        if dims != len(bounds):
            raise ValueError("the bounds decoration does not match the array's dimensions")
        value = general(nested, dims, [lo for lo, _ in bounds])
        if [d["length"] for d in value["dimensions"]] != [hi - lo + 1 for lo, hi in bounds]:
            raise ValueError("the bounds decoration does not match the array's lengths")
        return value

    def parse(text: str) -> list | dict:
        if text[0] == "[":
            return decorated(text)
        if text[0] != "{" or text[-1] != "}":
            raise ValueError("not an array literal")
        if nesting == 1 and '"' not in text and "\\" not in text and text.find("{", 1) < 0:
            body = text[1:-1]
            if not body:
                return []
            items = body.split(delim)
            if "NULL" not in body and "ull" not in body.lower():
                return items if identity else [element(x) for x in items]
            return [
                None if len(x) == 4 and x.upper() == "NULL" else x if identity else element(x)
                for x in items
            ]
        result, dims = full(text)
        if dims and dims != nesting:  # PostgreSQL does not enforce the declaration
            return general(result, dims, [1] * dims)
        return result

    return parse


def _range_schema(rng: PgType, bound: Any) -> dict:
    bound_type = nullable(bound)
    return {
        "type": "record",
        "name": avro_name(rng.name, stable=True),
        "namespace": _type_namespace(rng),
        "doc": f"PostgreSQL range {rng.schema}.{rng.name}; a null bound is unbounded.",
        "fields": [
            {"name": "empty", "type": "boolean"},
            {"name": "lower", "type": bound_type},
            {"name": "upper", "type": bound_type},
            {"name": "lower_inclusive", "type": "boolean"},
            {"name": "upper_inclusive", "type": "boolean"},
        ],
    }


def _range_bound(text: str, i: int, stops: str) -> tuple[str | None, int]:
    """One range bound starting at ``i``: ``(text or None when omitted, index after it)``."""
    n = len(text)
    if i < n and text[i] in stops:
        return None, i
    out: list[str] = []
    in_quotes = False
    while i < n:
        c = text[i]
        if in_quotes:
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                if i + 1 < n and text[i + 1] == '"':
                    out.append('"')
                    i += 2
                    continue
                in_quotes = False
                i += 1
                continue
            out.append(c)
            i += 1
            continue
        if c in stops:
            return "".join(out), i
        if c == '"':
            in_quotes = True
        elif c == "\\" and i + 1 < n:
            out.append(text[i + 1])
            i += 1
        else:
            out.append(c)
        i += 1
    raise ValueError("unterminated range")


def _empty_range() -> dict[str, Any]:
    return {
        "empty": True,
        "lower": None,
        "upper": None,
        "lower_inclusive": False,
        "upper_inclusive": False,
    }


def _range_at(text: str, i: int, bound: Callable[[str], Any]) -> tuple[dict[str, Any], int]:
    if text.startswith("empty", i):
        return _empty_range(), i + 5
    opener = text[i]
    if opener != "[" and opener != "(":
        raise ValueError("not a range literal")
    lower, i = _range_bound(text, i + 1, ",")
    upper, i = _range_bound(text, i + 1, ")]")
    closer = text[i]
    return {
        "empty": False,
        "lower": None if lower is None else bound(lower),
        "upper": None if upper is None else bound(upper),
        "lower_inclusive": opener == "[",
        "upper_inclusive": closer == "]",
    }, i + 1


def _range_parser(bound: Callable[[str], Any]) -> Callable[[str], dict]:
    def parse(text: str) -> dict[str, Any]:
        value, end = _range_at(text, 0, bound)
        if end != len(text):
            raise ValueError("text after the range")
        return value

    return parse


def _multirange_parser(bound: Callable[[str], Any]) -> Callable[[str], list]:
    def parse(text: str) -> list[dict[str, Any]]:
        if text[0] != "{" or text[-1] != "}":
            raise ValueError("not a multirange literal")
        out: list[dict[str, Any]] = []
        i, n = 1, len(text) - 1
        while i < n:
            c = text[i]
            if c == "," or c.isspace():
                i += 1
                continue
            value, i = _range_at(text, i, bound)
            out.append(value)
        return out

    return parse


_HSTORE_PAIR = re.compile(
    r'\s*"((?:[^"\\]|\\.)*)"\s*=>\s*(?:"((?:[^"\\]|\\.)*)"|(NULL))\s*(?:,|\Z)', re.S | re.I
)


def _parse_hstore(text: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    i, n = 0, len(text)
    while i < n:
        m = _HSTORE_PAIR.match(text, i)
        if m is None:
            if not text[i:].strip():
                break
            raise ValueError("not an hstore literal")
        key, value, null = m.groups()
        out[_unescape(key)] = None if null else _unescape(value)
        i = m.end()
    return out


# --------------------------------------------------------------------------- mapping

_STRING = "string"

# pg_catalog base types with a dedicated mapping: name → (schema, parser).
_SCALARS: dict[str, tuple[Any, Callable[[str], Any]]] = {
    "bool": ("boolean", _parse_bool),
    "int2": ("int", int),
    "int4": ("int", int),
    "int8": ("long", int),
    "oid": ("long", int),
    "xid": ("long", int),
    "cid": ("long", int),
    "float4": ("float", _parse_float4),
    "float8": ("double", float),
    "money": (
        {"type": "bytes", "logicalType": "decimal", "precision": 19, "scale": 2},
        _parse_money,
    ),
    "bytea": ("bytes", _parse_bytea),
    "uuid": ({"type": "string", "logicalType": "uuid"}, _ident),
    "date": ({"type": "int", "logicalType": "date"}, _parse_date),
    "timestamp": (
        {"type": "long", "logicalType": "local-timestamp-micros"},
        _timestamp_parser(False),
    ),
    "timestamptz": ({"type": "long", "logicalType": "timestamp-micros"}, _timestamp_parser(True)),
    "time": ({"type": "long", "logicalType": "time-micros"}, _parse_time),
    "interval": (INTERVAL_SCHEMA, _parse_interval),
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
        return _STRING, _ident  # exact decimal text, "NaN", "Infinity", "-Infinity"
    precision, scale = ps
    if scale < 0:  # numeric(3,-2) holds integers up to 99900: 5 digits, scale 0
        precision, scale = precision - scale, 0
    elif scale > precision:  # numeric(2,4) holds 0.0099 at most: 4 digits, scale 4
        precision = scale
    decimal = {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}
    return [decimal, _STRING], _parse_decimal_or_special


def _build(pg: PgType, typmod: int, nesting: int) -> tuple[Any, Callable[[str], Any], str]:
    """(schema, parser, type name for messages) of ``pg`` with ``typmod``; ``nesting`` is the
    number of array dimensions to expect if ``pg`` turns out to be an array type."""
    kind = pg.kind
    if kind == "d":
        if pg.base is None:
            return _STRING, _ident, pg.name
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
        parse = _array_parser(elem_parse, elem.array_delimiter, max(nesting, 1), name)
        # One record per element type, whatever the column's dimensions; a typmod that
        # changes the element's schema (numeric(p,s)) gets its own record.
        record = f"{avro_name(elem.name, stable=True)}_array"
        if typmod >= 0 and elem_schema != _build(elem, -1, 1)[0]:
            record += "_" + short_hash(json.dumps(elem_schema, sort_keys=True))
        general = general_array_schema(record, _type_namespace(elem), leaf)
        return [{"type": "array", "items": items}, general], parse, name
    if kind == "e":
        return {"type": "string", "pg.enum": list(pg.labels)}, _ident, pg.name
    if kind == "r" and pg.subtype is not None:
        bound_schema, bound_parse, _ = _build(pg.subtype, -1, 1)
        return _range_schema(pg, bound_schema), _range_parser(bound_parse), pg.name
    if kind == "m" and pg.subtype is not None:
        rng = pg.subtype
        if rng.kind != "r":  # given the bound type itself: name the record after the multirange
            rng = PgType(0, pg.name + "_range", pg.schema, "r", "R", subtype=rng)
        if rng.subtype is None:
            return _STRING, _ident, pg.name
        bound_schema, bound_parse, _ = _build(rng.subtype, -1, 1)
        schema = {"type": "array", "items": _range_schema(rng, bound_schema)}
        return schema, _multirange_parser(bound_parse), pg.name
    if pg.name == "hstore" and kind == "b":
        return {"type": "map", "values": ["null", _STRING]}, _parse_hstore, pg.name
    if pg.schema == "pg_catalog" and kind == "b":
        if pg.name == "numeric":
            schema, parse = _numeric(typmod)
            return schema, parse, pg.name
        scalar = _SCALARS.get(pg.name)
        if scalar is not None:
            return scalar[0], scalar[1], pg.name
    # Text types, json, network, geometric, bit strings, composites, extension types, anything
    # unknown: the type's text output, exactly.
    return _STRING, _ident, pg.name


def codec_for(column: Column) -> Codec:
    """The :class:`Codec` of ``column`` (build it once per column, reuse it for every row)."""
    schema, parse, name = _build(column.type, column.typmod, max(column.ndims, 1))
    if parse is _ident:
        parse = str  # the identity, in C: row encoders recognise it and skip the call
    return Codec(schema, parse, column.formatted or name)


# --------------------------------------------------------------------------- from a schema

_LOGICAL_PARSERS: dict[str, Callable[[str], Any]] = {
    "decimal": _parse_money,  # a decimal alone is money (numeric is [decimal, string])
    "date": _parse_date,
    "timestamp-micros": _timestamp_parser(True),
    "local-timestamp-micros": _timestamp_parser(False),
    "time-micros": _parse_time,
    "uuid": _ident,
}
_PRIMITIVE_PARSERS: dict[str, Callable[[str], Any]] = {
    "boolean": _parse_bool, "int": int, "long": int, "float": _parse_float4, "double": float,
    "bytes": _parse_bytea, "string": _ident,
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
                return _parse_decimal_or_special
            t = rest[0]
        elif isinstance(t, str) and t in named:
            t = named[t]
        elif isinstance(t, dict) and (isinstance(t.get("type"), dict | list)
                                      or t.get("type") in named):
            t = t["type"]  # {"type": <a type>}
        else:
            break
    if isinstance(t, str):
        return _PRIMITIVE_PARSERS.get(t, _ident)
    logical = _LOGICAL_PARSERS.get(t.get("logicalType", ""))
    if logical is not None:
        return logical
    kind = t.get("type")
    if kind == "record":
        fields = [f["name"] for f in t["fields"]]
        if fields == ["months", "days", "microseconds"]:
            return _parse_interval
        if fields == _RANGE_FIELDS:
            return _range_parser(text_parser(t["fields"][1]["type"], named))
        return _ident
    if kind == "array":
        return _array_text_parser(t, named, pg_type)
    if kind == "map":
        return _parse_hstore
    if isinstance(kind, str) and kind in _PRIMITIVE_PARSERS:
        return _PRIMITIVE_PARSERS[kind]
    return _ident


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
        return _multirange_parser(text_parser(inner["fields"][1]["type"], named))
    element_pg = pg_type.strip().removesuffix("[]").rsplit(".", 1)[-1].strip('"')
    delim = ";" if element_pg.removesuffix("[]") == "box" else ","
    return _array_parser(text_parser(items, named), delim, nesting, pg_type or "array")
