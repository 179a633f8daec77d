"""Parsers of the text output of PostgreSQL's scalar types that need more than ``int`` or ``float``
(booleans, exact float4, numeric's specials, money, bytea), and the backslash escapes of array
and hstore literals."""

from __future__ import annotations

import re
import struct
from decimal import Decimal


def ident(text: str) -> str:
    return text


_BOOL = {"t": True, "f": False, "true": True, "false": False}


def parse_bool(text: str) -> bool:
    return _BOOL[text]


_F32 = struct.Struct("<f")
_U32 = struct.Struct("<I")


def _f32_from_bits(bits: int) -> float:
    return _F32.unpack(_U32.pack(bits))[0]


def parse_float4(text: str) -> float:
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


def parse_decimal_or_special(text: str) -> Decimal | str:
    # "NaN", "Infinity", "-Infinity" go to the string branch of the union, as text.
    return text if text[-1] in "Ny" else Decimal(text)


_MONEY_NOISE = re.compile(r"[^0-9.]")


def parse_money(text: str) -> Decimal:
    negative = text[0] == "-" or text[0] == "("
    digits = _MONEY_NOISE.sub("", text)
    if not digits or text.count(".") > 1:
        raise ValueError("not a money amount")
    value = Decimal(digits)
    return -value if negative else value


_OCTAL_ESCAPE = re.compile(rb"\\([0-7]{3})|\\\\")


def parse_bytea(text: str) -> bytes:
    if text[:2] == "\\x":
        return bytes.fromhex(text[2:])
    # bytea_output = escape: printable bytes as is, "\\" for a backslash, "\ooo" otherwise.
    raw = text.encode("latin-1") if text.isascii() else text.encode("utf-8")
    return _OCTAL_ESCAPE.sub(lambda m: bytes([int(m.group(1), 8)]) if m.group(1) else b"\\", raw)


_BACKSLASH_ESCAPE = re.compile(r"\\(.)", re.S)


def unescape(text: str) -> str:
    return _BACKSLASH_ESCAPE.sub(r"\1", text) if "\\" in text else text
