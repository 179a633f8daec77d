"""Avro binary encoders compiled for one schema: the bytes ``fastavro.schemaless_writer`` writes,
several times faster.

:func:`compile_writer` parses the schema once, with fastavro's own parser (so names, namespaces
and references resolve exactly as fastavro resolves them), and generates a Python function for
it: one straight-line function per record that appends byte strings to a list which is joined
once, with zigzag varints of small ints and lengths taken from precomputed tables. Nothing about
the schema is interpreted per call.

What fastavro does, this does, for every datum fastavro accepts as valid: union branches are
chosen by fastavro's rules (first branch whose validation passes; a record branch only wins over
a later record branch by matching more fields and loses to any later non-record match; ``float``
yields to a later ``double``; tuple notation ``(name, datum)``), logical types convert
``datetime``/``date``/``time``/``uuid.UUID``/``Decimal`` values the same way, a missing field
takes its default (or null when the field's type admits null). Common cases skip the general
rules: ``None`` goes straight to the null branch and a datum whose exact class selects one
branch goes straight to it.

Deliberately different: what fastavro writes without complaint but wrongly (an ``int`` beyond
int32 for ``int``; a float, ``Decimal`` or ``UUID`` truncated into a ``long``; anything truthy
as a ``boolean``; a decimal that does not fit its ``fixed`` size) raises instead, and
``Decimal("-0")`` in a fixed decimal is written as zero (fastavro writes -2 units in the last
place). The other way round, data that fastavro's union validation would refuse deep inside a
branch chosen by class (a bool item in an array of ints, a ``"-type"`` naming another record)
is written as the branch's plain writer writes it, as fastavro does outside unions.

Errors are :class:`AvroValueError` / :class:`AvroTypeError` (subclasses of ``ValueError`` /
``TypeError``) whose message names the field path, e.g. ``field 'pauses[2].days': ...``.
"""

from __future__ import annotations

import json
import linecache
import numbers
import operator
import struct
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import date, datetime, time
from decimal import Decimal
from itertools import count
from typing import Any

import fastavro
from fastavro.write import LOGICAL_WRITERS

__all__ = [
    "AvroTypeError",
    "AvroValueError",
    "compile_writer",
]

Writer = Callable[[Any], bytes]

# --------------------------------------------------------------------------- errors


class _PathError:
    """An encoding error with the path of the offending value, outermost segment first."""

    def __init__(self, reason: str, path: Sequence[str] = ()):
        super().__init__(reason)
        self.reason = reason
        self.path = list(path)

    def __str__(self) -> str:
        if not self.path:
            return self.reason
        where = "".join(s if s.startswith("[") else "." + s for s in self.path).lstrip(".")
        return f"field {where!r}: {self.reason}"


class AvroValueError(_PathError, ValueError):
    """A value that its schema cannot hold (out of range, unknown symbol, missing field...)."""


class AvroTypeError(_PathError, TypeError):
    """A value of the wrong Python type for its schema."""


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:75] + "...)"
    return f"{type(value).__name__} {text}"


def _wrap(exc: Exception, segment: str | None, value: Any, desc: str) -> BaseException:
    """``exc`` as an Avro*Error with ``segment`` prepended to its path; called from the
    generated code's ``except`` clauses (which cost nothing until something is raised)."""
    if isinstance(exc, _PathError):
        if segment is None:
            return exc
        new = type(exc)(exc.reason, [segment, *exc.path])
        cause = exc.__cause__
    else:
        path = [] if segment is None else [segment]
        if isinstance(exc, TypeError | AttributeError | struct.error):
            # raised by the generated code's operations on a value of the wrong type
            new = AvroTypeError(f"expected {desc}, got {_show(value)}", path)
        elif isinstance(exc, ValueError | ArithmeticError | LookupError):
            new = AvroValueError(f"cannot write {_show(value)} as {desc}: {exc}", path)
        else:
            return exc  # not a data problem (MemoryError, RecursionError...): leave it alone
        cause = exc
    new.__cause__ = cause
    new.__suppress_context__ = True
    return new


def _item_segment(items: list, item: Any) -> str:
    """``[i]`` for the failing ``item`` of ``items`` (the loop variable still holds it)."""
    for i, x in enumerate(items):
        if x is item:
            return f"[{i}]"
    return "[?]"


def _wrap_item(exc: Exception, items: list, item: Any, desc: str) -> BaseException:
    return _wrap(exc, _item_segment(items, item), item, desc)


def _wrap_value(exc: Exception, key: Any, value: Any, desc: str) -> BaseException:
    return _wrap(exc, f"[{key!r}]", value, desc)


def _missing(name: str) -> AvroValueError:
    return AvroValueError("missing from the record, and the field has no default", [name])


# --------------------------------------------------------------------------- varints


def _varint(z: int) -> bytes:
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# The varint of every value below 2**14 (1 or 2 bytes), and 14-bit groups with continuation bits:
# a varint is CONT[low 14 bits] + CONT[next 14] + ... + LAST[rest]. 2 x 16384 small bytes objects.
_LAST = [_varint(z) for z in range(1 << 14)]
_CONT = [bytes(((z & 0x7F) | 0x80, (z >> 7) | 0x80)) for z in range(1 << 14)]
#: _SMALL[n + 8192]: the zigzag varint of n, for -8192 <= n < 8192.
_SMALL = [_LAST[(n << 1) ^ (n >> 63)] for n in range(-8192, 8192)]
#: _LEN[n]: the varint of a length n < 8192 (lengths and counts are longs too: zigzag 2n).
_LEN = _LAST[0::2]
_LONG_MIN, _LONG_MAX = -(1 << 63), (1 << 63) - 1
_INT_MIN, _INT_MAX = -(1 << 31), (1 << 31) - 1


def _long(n: Any) -> bytes:
    """Zigzag varint of an Avro long (the generated code's path for |n| >= 8192)."""
    if n.__class__ is not int:
        n = _as_int(n, "long")
    z = n << 1 if n >= 0 else ~n << 1 | 1
    if z < 0x10000000:
        if z < 0x4000:
            return _LAST[z]
        return _CONT[z & 0x3FFF] + _LAST[z >> 14]
    if z < 0x40000000000:
        return _CONT[z & 0x3FFF] + _CONT[(z >> 14) & 0x3FFF] + _LAST[z >> 28]
    if z < 0x100000000000000:
        return b"".join(
            (
                _CONT[z & 0x3FFF],
                _CONT[(z >> 14) & 0x3FFF],
                _CONT[(z >> 28) & 0x3FFF],
                _LAST[z >> 42],
            )
        )
    if z >> 64:
        raise AvroValueError(f"{n} is out of range for Avro long (64-bit)")
    parts = [_CONT[(z >> shift) & 0x3FFF] for shift in (0, 14, 28, 42)]
    return b"".join((*parts, _LAST[z >> 56]))


def _as_int(n: Any, kind: str) -> int:
    # int subclasses and numpy integers (whose shifts would wrap at 64 bits) become ints
    if isinstance(n, float | Decimal | str | bytes) or n is None:
        raise AvroTypeError(f"expected an int for Avro {kind}, got {_show(n)}")
    try:
        return operator.index(n)
    except TypeError:
        raise AvroTypeError(f"expected an int for Avro {kind}, got {_show(n)}") from None


def _int(n: Any) -> bytes:
    if n.__class__ is not int:
        n = _as_int(n, "int")
    if not _INT_MIN <= n <= _INT_MAX:
        raise AvroValueError(f"{n} is out of range for Avro int (32-bit)")
    return _long(n)


def _index(i: int) -> bytes:
    return _SMALL[i + 8192]


_PREFIXED_LENGTHS: dict[bytes, list[bytes]] = {}


def _prefixed_lengths(prefix: bytes) -> list[bytes]:
    """_LEN with ``prefix`` (a union index) in front of each length, shared by all writers."""
    table = _PREFIXED_LENGTHS.get(prefix)
    if table is None:
        table = _PREFIXED_LENGTHS[prefix] = [prefix + n for n in _LEN]
    return table


# --------------------------------------------------------------------------- scalars

_pack_f = struct.Struct("<f").pack
_pack_d = struct.Struct("<d").pack
_INF32, _NINF32 = _pack_f(float("inf")), _pack_f(float("-inf"))


def _float_overflow(value: Any) -> bytes:
    # struct refuses finite doubles beyond float32's range; fastavro's C cast makes them ±inf
    return _INF32 if float(value) > 0 else _NINF32


def _bad_boolean(value: Any) -> bytes:
    raise AvroTypeError(f"expected a bool for Avro boolean, got {_show(value)}")


def _not_null(value: Any) -> None:
    raise AvroTypeError(f"expected None for Avro null, got {_show(value)}")


def _as_bytes(value: Any) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise AvroTypeError(f"expected bytes, got {_show(value)}")


def _as_list(value: Any) -> list:
    # fastavro writes any iterable as an array (it calls list() on it, so bytes are ints);
    # strings and mappings are never meant as one
    if isinstance(value, str | Mapping) or value is None:
        raise AvroTypeError(f"expected a list for Avro array, got {_show(value)}")
    return list(value)


def _check_map(value: Any) -> None:
    if not isinstance(value, Mapping):
        raise AvroTypeError(f"expected a dict for Avro map, got {_show(value)}")


def _map_key(key: Any) -> bytes:
    if isinstance(key, str):
        return key.encode()
    raise AvroTypeError(f"map keys must be str, got {_show(key)}")


def _as_record(value: Any, name: str) -> dict:
    # a plain dict copy: lookups below must not call a subclass's __missing__
    if isinstance(value, Mapping):
        return dict(value)
    raise AvroTypeError(f"expected a dict for record {name}, got {_show(value)}")


def _bad_symbol(value: Any, name: str, symbols: list[str]) -> AvroValueError:
    shown = symbols if len(symbols) <= 10 else [*symbols[:10], "..."]
    return AvroValueError(f"{value!r} is not a symbol of enum {name} {shown}")


def _bad_size(value: bytes, size: int) -> AvroValueError:
    return AvroValueError(f"{len(value)} bytes for a fixed of size {size}")


def _uuid_text(value: Any) -> Any:
    return str(value) if isinstance(value, uuid.UUID) else value


# --------------------------------------------------------------------------- decimals

_ASCII_DIGITS = bytes.maketrans(bytes(range(10)), b"0123456789")


def _coefficient(digits: tuple[int, ...]) -> int:
    """The integer with these decimal digits, exactly (in chunks: int() refuses > 4300)."""
    text = bytes(digits).translate(_ASCII_DIGITS)
    if len(text) <= 4000:
        return int(text)
    value = 0
    for i in range(0, len(text), 4000):
        chunk = text[i : i + 4000]
        value = value * 10 ** len(chunk) + int(chunk)
    return value


def _unscaled_exact(value: Decimal, precision: int | None, scale: int) -> int:
    """``value`` times 10**scale as an exact int, from ``as_tuple()``, with fastavro's checks:
    at most ``precision`` digits as written, at most ``scale`` digits after the point."""
    sign, digits, exponent = value.as_tuple()
    if not isinstance(exponent, int):
        raise AvroValueError(f"{value} cannot be written as an Avro decimal")
    if precision is None:
        raise AvroValueError("the decimal schema has no precision")
    if len(digits) > precision:
        raise AvroValueError(f"{value} has more than the {precision} digits of the schema")
    if -exponent > scale:
        raise AvroValueError(f"{value} has more than the {scale} fraction digits of the schema")
    coefficient = _coefficient(digits) * 10 ** (exponent + scale)
    return -coefficient if sign else coefficient


def _unscaler(precision: int | None, scale: int) -> Callable[[Decimal], int]:
    """``unscaled(value)`` for a ``Decimal`` (exact class): what :func:`_unscaled_exact`
    computes, fast for the common cases.

    The digits and the exponent are read off ``str(value)``, which is exact (no context is
    involved) and much cheaper than ``as_tuple()``: "1234.5" is 12345 with 1 fraction digit.
    Exponent notation ("1E+3"), NaN, infinities, values of more than 4300 digits (which int()
    refuses) and every error go through ``as_tuple()``."""
    limit = 10**precision if precision is not None else 0
    tens = [10**k for k in range(scale + 1)]
    dot = -scale - 1

    def unscaled(value: Decimal) -> int:
        text = str(value)
        if scale and len(text) > scale and text[dot] == ".":  # exactly `scale` fraction digits
            try:
                u = int(text.replace(".", ""))
            except ValueError:
                return _unscaled_exact(value, precision, scale)
            if -limit < u < limit:  # at most `precision` digits as written
                return u
            return _unscaled_exact(value, precision, scale)
        point = text.find(".")
        if point < 0:
            frac = 0
        else:
            frac = len(text) - point - 1
            text = text.replace(".", "", 1)
        if frac <= scale:
            try:
                u = int(text)
            except ValueError:
                pass
            else:
                if -limit < u < limit:
                    return u * tens[scale - frac]
        return _unscaled_exact(value, precision, scale)

    return unscaled


def _decimal_bytes(precision: int | None, scale: int) -> Callable[[Any], bytes]:
    """The payload of a ``bytes`` decimal: big-endian two's complement in (bit length + 8) // 8
    bytes, as fastavro sizes it. Other bytes-like values pass through, as in fastavro."""
    unscaled = _unscaler(precision, scale)

    def encode(value: Any) -> bytes:
        if value.__class__ is not Decimal:
            if not isinstance(value, Decimal):
                return _as_bytes(value)
            value = Decimal(value)  # a subclass may format itself differently
        u = unscaled(value)
        return u.to_bytes((u.bit_length() + 8) >> 3, "big", signed=True)

    return encode


def _decimal_fixed(precision: int | None, scale: int, size: int) -> Callable[[Any], bytes]:
    """The ``size`` bytes of a ``fixed`` decimal (big-endian two's complement)."""
    unscaled = _unscaler(precision, scale)

    def encode(value: Any) -> bytes:
        if value.__class__ is not Decimal:
            if not isinstance(value, Decimal):
                return _as_bytes(value)
            value = Decimal(value)
        try:
            return unscaled(value).to_bytes(size, "big", signed=True)
        except OverflowError:
            raise AvroValueError(f"{value} does not fit in a fixed of {size} bytes") from None

    return encode


# --------------------------------------------------------------------------- schema helpers

_PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
_RECORDS = frozenset(("record", "error"))
_NAMED = frozenset(("record", "error", "enum", "fixed"))


def _record_type(schema: Any) -> str:
    """fastavro's extract_record_type: the type name, a named type's name, or "union"."""
    if isinstance(schema, dict):
        return schema["type"]
    if isinstance(schema, list):
        return "union"
    return schema


def _logical(schema: Any) -> str | None:
    """fastavro's logical-type key ("long-timestamp-micros"), or None."""
    if isinstance(schema, dict) and schema.get("logicalType"):
        return f"{schema['type']}-{schema['logicalType']}"
    return None


def _describe(schema: Any, depth: int = 0) -> str:
    """A short human description of a (parsed) schema, for error messages."""
    if isinstance(schema, list):
        return "[" + ", ".join(_describe(s, depth + 1) for s in schema) + "]"
    if not isinstance(schema, dict):
        return str(schema)
    kind = schema["type"]
    if kind in _NAMED:
        return f"{kind} {schema['name']}"
    logical = schema.get("logicalType")
    if logical == "decimal":
        return f"decimal({schema.get('precision')},{schema.get('scale', 0)})"
    if logical:
        return f"{kind} ({logical})"
    if depth > 2:
        return str(kind)
    if kind == "array":
        return f"array<{_describe(schema['items'], depth + 1)}>"
    if kind == "map":
        return f"map<{_describe(schema['values'], depth + 1)}>"
    return str(kind)


# Exact classes the generated union code dispatches on without running fastavro's validation,
# most frequent first (they are tested in this order).
_DISPATCH_CLASSES = (int, str, Decimal, float, bool, dict, list, bytes, datetime, date, uuid.UUID)


# --------------------------------------------------------------------------- compiler


class _Compiler:
    def __init__(self, named: dict[str, dict]):
        self.named = named
        self.ns: dict[str, Any] = {
            "_SMALL": _SMALL,
            "_LEN": _LEN,
            "_long": _long,
            "_int": _int,
            "_pf": _pack_f,
            "_pd": _pack_d,
            "_float_overflow": _float_overflow,
            "_bad_boolean": _bad_boolean,
            "_not_null": _not_null,
            "_as_bytes": _as_bytes,
            "_as_list": _as_list,
            "_check_map": _check_map,
            "_map_key": _map_key,
            "_as_record": _as_record,
            "_bad_symbol": _bad_symbol,
            "_bad_size": _bad_size,
            "_uuid_text": _uuid_text,
            "_wrap": _wrap,
            "_wrap_item": _wrap_item,
            "_wrap_value": _wrap_value,
            "_missing": _missing,
            "_float": float,
            "_dict": dict,
            "_list": list,
            "_bytes": bytes,
            "_str": str,
            "_int_cls": int,
            "_bool": bool,
            "_Decimal": Decimal,
            "_len": len,
        }
        self.source: list[str] = []
        self.records: dict[str, str] = {}  # full name -> generated function name
        self.branch_writers: dict[int, str] = {}  # id(schema) -> generated function name
        self.validators: dict[Any, Callable[[Any], bool]] = {}
        self.counter = count()

    # ---- names and constants

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.counter)}"

    def const(self, value: Any, prefix: str = "K") -> str:
        name = self.fresh(prefix)
        self.ns[name] = value
        return name

    def resolve(self, schema: Any) -> Any:
        """A named reference replaced by its definition (anything else unchanged)."""
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            return self.named[schema]  # fastavro's parser checked that it is defined
        return schema

    # ---- code emission: lines that append the encoding of `var` with `a`

    def emit(
        self,
        schema: Any,
        var: str,
        out: list[str],
        ind: str,
        known: type | None = None,
        prefix: bytes = b"",
    ):
        """Lines appending the encoding of ``var`` (preceded by ``prefix``, a union index)
        with ``a``; ``known`` is the exact class of ``var`` when the caller checked it."""
        schema = self.resolve(schema)
        kind = _record_type(schema)
        logical = _logical(schema)
        if prefix and kind not in ("bytes", "string"):
            out.append(f"{ind}a({prefix!r})")
        if kind == "union":
            return self.emit_union(schema, var, out, ind)
        if kind == "null":
            out.append(f"{ind}if {var} is not None: _not_null({var})")
        elif kind == "boolean":
            out.append(
                f"{ind}a(b'\\x01' if {var} is True else b'\\x00' if {var} is False"
                f" else _bad_boolean({var}))"
            )
        elif kind in ("int", "long"):
            if logical in LOGICAL_WRITERS and known is not int:
                # datetime/date/time (and ISO date strings) converted exactly as fastavro does
                prepare = LOGICAL_WRITERS[logical]
                fn = self.const(lambda v, _p=prepare, _s=schema: _p(v, _s), "prep")
                out.append(f"{ind}if {var}.__class__ is not _int_cls: {var} = {fn}({var})")
            slow = "_long" if kind == "long" else "_int"
            out.append(f"{ind}a(_SMALL[{var} + 8192] if -8192 <= {var} < 8192 else {slow}({var}))")
        elif kind in ("float", "double"):
            if kind == "double":
                out.append(f"{ind}a(_pd({var}))")
            else:
                out += [
                    f"{ind}try:",
                    f"{ind}    a(_pf({var}))",
                    f"{ind}except OverflowError:",
                    f"{ind}    a(_float_overflow({var}))",
                ]
        elif kind == "bytes":
            if logical == "bytes-decimal":
                precision, scale = schema.get("precision"), schema.get("scale", 0)
                if known is Decimal:
                    fn, u = self.const(_unscaler(precision, scale), "unscaled"), self.fresh("u")
                    out.append(f"{ind}{u} = {fn}({var})")
                    size = f"({u}.bit_length() + 8) >> 3"
                    out.append(f"{ind}{var} = {u}.to_bytes({size}, 'big', signed=True)")
                elif known is not bytes:
                    fn = self.const(_decimal_bytes(precision, scale), "dec")
                    out.append(f"{ind}if {var}.__class__ is not _bytes: {var} = {fn}({var})")
            elif known is not bytes:
                out.append(f"{ind}if {var}.__class__ is not _bytes: {var} = _as_bytes({var})")
            self.emit_sized(var, out, ind, prefix)
        elif kind == "string":
            if logical == "string-uuid" and known is not str:
                out.append(f"{ind}if {var}.__class__ is not _str: {var} = _uuid_text({var})")
            s = self.fresh("s")
            out.append(f"{ind}{s} = {var}.encode()")
            self.emit_sized(s, out, ind, prefix)
        elif kind == "fixed":
            size = schema["size"]
            if logical == "fixed-decimal":
                enc = _decimal_fixed(schema.get("precision"), schema.get("scale", 0), size)
                fn = self.const(enc, "dec")
                out.append(f"{ind}if {var}.__class__ is not _bytes: {var} = {fn}({var})")
            elif known is not bytes:
                out.append(f"{ind}if {var}.__class__ is not _bytes: {var} = _as_bytes({var})")
            out.append(f"{ind}if _len({var}) != {size!r}: raise _bad_size({var}, {size!r})")
            out.append(f"{ind}a({var})")
        elif kind == "enum":
            symbols = schema["symbols"]
            table = self.const({s: _index(i) for i, s in enumerate(symbols)}, "enum")
            args = self.const((schema["name"], list(symbols)), "sym")
            out += [
                f"{ind}try:",
                f"{ind}    a({table}[{var}])",
                f"{ind}except KeyError:",
                f"{ind}    raise _bad_symbol({var}, *{args}) from None",
            ]
        elif kind == "array":
            self.emit_array(schema, var, out, ind, known)
        elif kind == "map":
            self.emit_map(schema, var, out, ind, known)
        elif kind in _RECORDS:
            out.append(f"{ind}{self.record_function(schema)}({var}, a)")
        else:
            raise ValueError(f"unsupported Avro schema {schema!r}")

    def emit_sized(self, var: str, out: list[str], ind: str, prefix: bytes = b"") -> None:
        """Length then bytes; a union index goes into the length's piece (one append less)."""
        n = self.fresh("n")
        table, slow = "_LEN", f"_long({n})"
        if prefix:
            table, slow = self.const(_prefixed_lengths(prefix), "LEN"), f"{prefix!r} + {slow}"
        out += [
            f"{ind}{n} = _len({var})",
            f"{ind}a({table}[{n}] if {n} < 8192 else {slow})",
            f"{ind}a({var})",
        ]

    def emit_array(self, schema: dict, var: str, out: list[str], ind: str, known: type | None):
        items = schema["items"]
        n, x, e = self.fresh("n"), self.fresh("x"), self.fresh("e")
        desc = self.const(_describe(items), "desc")
        if known is not list:
            out.append(f"{ind}if {var}.__class__ is not _list: {var} = _as_list({var})")
        out += [
            f"{ind}{n} = _len({var})",
            f"{ind}if {n}:",
            f"{ind}    a(_LEN[{n}] if {n} < 8192 else _long({n}))",
            f"{ind}    for {x} in {var}:",
            f"{ind}        try:",
        ]
        self.emit(items, x, out, ind + "            ")
        out += [
            f"{ind}        except Exception as {e}:",
            f"{ind}            raise _wrap_item({e}, {var}, {x}, {desc})",
            f"{ind}a(b'\\x00')",
        ]

    def emit_map(self, schema: dict, var: str, out: list[str], ind: str, known: type | None):
        values = schema["values"]
        n, k, x, e = self.fresh("n"), self.fresh("k"), self.fresh("x"), self.fresh("e")
        desc = self.const(_describe(values), "desc")
        if known is not dict:
            out.append(f"{ind}if {var}.__class__ is not _dict: _check_map({var})")
        out += [
            f"{ind}{n} = _len({var})",
            f"{ind}if {n}:",
            f"{ind}    a(_LEN[{n}] if {n} < 8192 else _long({n}))",
            f"{ind}    for {k}, {x} in {var}.items():",
            f"{ind}        try:",
        ]
        inner = ind + "            "
        kb = self.fresh("s")
        out.append(f"{inner}{kb} = {k}.encode() if {k}.__class__ is _str else _map_key({k})")
        self.emit_sized(kb, out, inner)
        self.emit(values, x, out, inner)
        out += [
            f"{ind}        except Exception as {e}:",
            f"{ind}            raise _wrap_value({e}, {k}, {x}, {desc})",
            f"{ind}a(b'\\x00')",
        ]

    # ---- records

    def record_function(self, schema: dict) -> str:
        """The name of the generated ``(datum, a)`` function of a record (generated once per
        full name, so recursive types just call themselves)."""
        name = schema["name"]
        if name not in self.records:
            fn = self.records[name] = self.fresh("record")
            lines = [f"def {fn}(d, a):"]
            self.record_body(schema, "d", lines, "    ")
            self.source.append("\n".join(lines))
        return self.records[name]

    def record_body(self, schema: dict, d: str, out: list[str], ind: str) -> None:
        out.append(f"{ind}if {d}.__class__ is not _dict: {d} = _as_record({d}, {schema['name']!r})")
        for field in schema["fields"]:
            name, ftype = field["name"], field["type"]
            v, e = self.fresh("v"), self.fresh("e")
            if "default" in field:
                default = field["default"]
            elif (isinstance(ftype, str | list)) and "null" in ftype:
                default = None  # fastavro writes null for a missing field of a nullable type
            else:
                default = _missing
            # a dict subscript in a zero-cost try is the fastest lookup; d is a plain dict
            out += [f"{ind}try:", f"{ind}    {v} = {d}[{name!r}]", f"{ind}except KeyError:"]
            if default is _missing:
                out.append(f"{ind}    raise _missing({name!r}) from None")
            elif default is None or isinstance(default, bool | int | str):
                out.append(f"{ind}    {v} = {default!r}")
            else:
                out.append(f"{ind}    {v} = {self.const(default, 'default')}")
            out.append(f"{ind}try:")
            if ftype in ("float", "double"):
                out.append(f"{ind}    {v} = _float({v})")  # fastavro does this ("NaN" works)
            self.emit(ftype, v, out, ind + "    ")
            desc = self.const(_describe(ftype), "desc")
            out += [
                f"{ind}except Exception as {e}:",
                f"{ind}    raise _wrap({e}, {name!r}, {v}, {desc})",
            ]

    # ---- unions

    def emit_union(self, branches: list, var: str, out: list[str], ind: str) -> None:
        resolved = [self.resolve(b) for b in branches]
        general = self.union_function(branches)
        dispatch = [(cls, self.direct_branch(resolved, branches, cls)) for cls in _DISPATCH_CLASSES]
        # bytes as an array (of ints) is fastavro's doing, not worth generated code of its own
        dispatch = [
            (cls, i)
            for cls, i in dispatch
            if i is not None and not (cls is bytes and _record_type(resolved[i]) == "array")
        ]
        keyword = "if"
        if "null" in resolved:  # only the null branch accepts None, wherever it is
            out += [f"{ind}if {var} is None:", f"{ind}    a({_index(resolved.index('null'))!r})"]
            keyword = "elif"
        cls_expr = f"{var}.__class__"
        if len(dispatch) > 1:  # look the class up once
            if keyword == "elif":
                out.append(f"{ind}else:")
                ind += "    "
            cls_expr = self.fresh("c")
            out.append(f"{ind}{cls_expr} = {var}.__class__")
            keyword = "if"
        for cls, i in dispatch:
            out.append(f"{ind}{keyword} {cls_expr} is {self.class_name(cls)}:")
            keyword = "elif"
            if resolved[i] == "boolean":  # index and value in one piece
                true, false = _index(i) + b"\x01", _index(i) + b"\x00"
                out.append(f"{ind}    a({true!r} if {var} else {false!r})")
            else:
                self.emit(branches[i], var, out, ind + "    ", known=cls, prefix=_index(i))
        if keyword == "if":
            out.append(f"{ind}{general}({var}, a)")
        else:
            out += [f"{ind}else:", f"{ind}    {general}({var}, a)"]

    def class_name(self, cls: type) -> str:
        fixed = {bool: "_bool", int: "_int_cls", float: "_float", str: "_str", bytes: "_bytes"}
        fixed |= {Decimal: "_Decimal", dict: "_dict", list: "_list"}
        return fixed.get(cls) or self.const(cls, "cls")

    def direct_branch(self, resolved: list, branches: list, cls: type) -> int | None:
        """The branch fastavro picks for *every* datum of exact class ``cls`` that it accepts
        at all, when that does not depend on the value; None when it does (or none fits)."""
        candidates = [i for i, b in enumerate(resolved) if _may_accept(b, cls)]
        if not candidates:
            return None
        if len(candidates) == 1:
            return candidates[0]
        i = candidates[0]
        if not _always_accepts(resolved[i], cls):
            return None
        kind = _record_type(resolved[i])
        if kind == "record":
            return None
        if kind == "float":  # fastavro prefers a later double
            later = [
                j for j in range(i + 1, len(branches)) if _record_type(branches[j]) == "double"
            ]
            return later[0] if later else i
        return i

    def union_function(self, branches: list) -> str:
        """The name of a ``(datum, a)`` function resolving the branch with fastavro's rules
        (validation of each branch in order) and writing the datum: the general path."""
        key = id(branches)
        if key in self.branch_writers:
            return self.branch_writers[key]
        fn = self.branch_writers[key] = self.fresh("union")
        infos = []
        for i, branch in enumerate(branches):
            raw_type = _record_type(branch)
            name = branch["name"] if raw_type in _NAMED else raw_type
            target = self.resolve(branch)
            fields = None
            if _record_type(target) == "record":
                fields = frozenset(f["name"] for f in target["fields"])
            writer = self.branch_function(branch)
            infos.append(
                (i, name, raw_type, _record_type(target), fields, self.validator(branch), writer)
            )
        self.ns[fn] = _union_writer(infos, self.ns, _describe(branches))
        return fn

    def branch_function(self, schema: Any) -> str:
        fn = self.fresh("branch")
        lines = [f"def {fn}(v, a):"]
        self.emit(schema, "v", lines, "    ")
        self.source.append("\n".join(lines))
        return fn

    # ---- validators: fastavro's _validate, for union resolution only

    def validator(self, schema: Any) -> Callable[[Any], bool]:
        if isinstance(schema, str) and schema not in _PRIMITIVES:
            if schema not in self.validators:
                self.validators[schema] = lambda v: True  # placeholder while recursing
                self.validators[schema] = self.validator(self.resolve(schema))
            return lambda v, _vs=self.validators, _n=schema: _vs[_n](v)
        return _make_validator(self, schema)


def _may_accept(schema: Any, cls: type) -> bool:
    """Could some value of exact class ``cls`` pass fastavro's validation of ``schema``?"""
    kind = _record_type(schema)
    logical = _logical(schema)
    if kind in ("int", "long"):
        extra = {
            "int-date": (date, datetime, str),
            "int-time-millis": (time,),
            "long-time-micros": (time,),
            "long-timestamp-millis": (datetime,),
            "long-timestamp-micros": (datetime,),
            "long-local-timestamp-millis": (datetime,),
            "long-local-timestamp-micros": (datetime,),
        }.get(logical or "", ())
        return cls is int or cls in extra
    accepted = {
        "null": (),
        "boolean": (bool,),
        "float": (int, float),
        "double": (int, float),
        "string": (str, uuid.UUID) if logical == "string-uuid" else (str,),
        "bytes": (bytes, Decimal) if logical == "bytes-decimal" else (bytes,),
        "fixed": (bytes, Decimal) if logical == "fixed-decimal" else (bytes,),
        "enum": (str,),
        "array": (list, bytes),  # bytes are a Sequence (of ints) to fastavro's validation
        "map": (dict,),
        "record": (dict,),
        "error": (dict,),
    }.get(kind, ())
    return cls in accepted


def _always_accepts(schema: Any, cls: type) -> bool:
    """Does every value of exact class ``cls`` pass (or make fastavro raise) for ``schema``?"""
    kind = _record_type(schema)
    if kind in ("boolean", "string", "float", "double", "bytes"):
        return _may_accept(schema, cls)
    if kind in ("int", "long"):
        return cls is not int and _may_accept(schema, cls)
    return False


def _union_writer(infos: list, ns: dict, desc: str) -> Callable[[Any, Callable], None]:
    indexes = [_index(i) for i in range(len(infos))]
    by_name = {}
    for i, name, *_ in infos:
        by_name.setdefault(name, i)

    def write(v: Any, a: Callable[[bytes], None]) -> None:
        if isinstance(v, tuple):  # fastavro's tuple notation: (type name, datum)
            name, v = v
            best = by_name.get(name, -1)
            if best < 0:
                raise AvroValueError(f"union type name {name!r} is not a branch of {desc}")
        else:
            best, most, could_be_float = -1, -1, False
            for i, _name, raw_type, kind, fields, valid, _writer in infos:
                if could_be_float:
                    if raw_type == "double":
                        best = i
                        break
                    continue
                if valid(v):
                    if kind == "record":
                        matched = len(fields.intersection(v))
                        if matched > most:
                            best, most = i, matched
                    elif kind == "float":
                        best, could_be_float = i, True
                    else:
                        best = i
                        break
            if best < 0:
                raise AvroValueError(f"no branch of {desc} accepts {_show(v)}")
        a(indexes[best])
        ns[infos[best][6]](v, a)

    return write


def _make_validator(comp: _Compiler, schema: Any) -> Callable[[Any], bool]:
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


def _base_validator(comp: _Compiler, schema: Any, kind: str) -> Callable[[Any], bool]:
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


# --------------------------------------------------------------------------- public API


_compiled = count(1)


def compile_writer(schema: dict | str | list, prefix: bytes = b"") -> Writer:
    """A function ``write(datum) -> bytes`` giving the Avro binary encoding of ``datum`` with
    ``schema`` (what ``fastavro.schemaless_writer`` writes), preceded by ``prefix``.

    ``schema`` is what fastavro accepts (a dict, a list for a union, a type name) or its JSON
    text. Compile once per schema and reuse the function; it is thread-safe. Invalid data
    raises :class:`AvroValueError` or :class:`AvroTypeError` naming the field path. The
    generated source is in ``write.source`` (and in tracebacks).
    """
    if isinstance(schema, str) and schema.lstrip()[:1] in ("{", "[", '"'):
        schema = json.loads(schema)
    named: dict[str, dict] = {}
    parsed = fastavro.parse_schema(schema, named, _write_hint=False, _force=True)
    comp = _Compiler(named)
    lines = ["def write(d):", f"    p = [{bytes(prefix)!r}]" if prefix else "    p = []"]
    lines += ["    a = p.append", "    try:"]
    top = comp.resolve(parsed)
    if isinstance(top, dict) and top["type"] in _RECORDS:
        comp.record_body(top, "d", lines, "        ")
    else:
        comp.emit(parsed, "d", lines, "        ")
    desc = comp.const(_describe(parsed), "desc")
    lines += [
        "    except Exception as e:",
        f"        raise _wrap(e, None, d, {desc})",
        "    return b''.join(p)",
    ]
    comp.source.append("\n".join(lines))
    source = "\n\n".join(comp.source) + "\n"
    # Only generated identifiers and repr() literals appear in the source; schema values
    # (defaults, tables, functions) are bound through the namespace.
    filename = f"<avro writer {next(_compiled)}: {_describe(parsed)[:60]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks
    exec(compile(source, filename, "exec"), comp.ns)  # noqa: S102
    write = comp.ns["write"]
    write.__doc__ = f"Avro binary encoding of a datum with {_describe(parsed)}."
    write.source = source  # type: ignore[attr-defined] - for debugging and tests
    return write
