"""Zigzag varints of Avro ints, longs, lengths and union indexes, mostly from precomputed
tables."""

from __future__ import annotations

import operator
from decimal import Decimal
from typing import Any

from schemas.avro_writer.errors import AvroTypeError, AvroValueError, _show


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
    if z < 0x100000000000000:  # today's timestamps in microseconds: concatenated, not joined
        return _CONT[z & 0x3FFF] + _CONT[(z >> 14) & 0x3FFF] + _CONT[(z >> 28) & 0x3FFF] + \
            _LAST[z >> 42]
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
    z = n << 1 if n >= 0 else ~n << 1 | 1
    if z < 0x10000000:  # _long's first case, without the call
        return _LAST[z] if z < 0x4000 else _CONT[z & 0x3FFF] + _LAST[z >> 14]
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
