"""What the generated readers call as they read: varints beyond one byte, the errors of malformed
data, and fastavro's conversions of logical types."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from decimal import Context, Decimal
from typing import Any

from fastavro.read import LOGICAL_READERS


class AvroReadError(ValueError):
    """Bytes that are not the encoding of a datum of the schema."""


# --------------------------------------------------------------------------- varints

#: _ZZ[b]: the value of the one-byte zigzag varint b (b < 0x80).
_ZZ = [(b >> 1) ^ -(b & 1) for b in range(0x80)]
#: _SIZE[b]: the length a one-byte varint b gives (b < 0x80, even), else -1 (the slow path).
_SIZE = [b >> 1 if b < 0x80 and not b & 1 else -1 for b in range(0x100)]


def _varint_reader(zigzag: bool) -> Callable[[bytes, int], tuple[int, int]]:
    """``read(d, p) -> (value, position after it)`` of the varint at ``p`` (zigzag-decoded or
    not): at most 10 bytes and 64 bits. Unrolled: a timestamp takes 8 bytes, a loop is slower."""
    value = "(z >> 1) ^ -(z & 1)" if zigzag else "z"
    lines = ["def read(d, p):", "    b = d[p]", "    z = b & 127"]
    for i in range(1, 9):
        lines += [
            f"    if b < 128: return {value}, p + {i}",
            f"    b = d[p + {i}]",
            f"    z |= (b & 127) << {7 * i}",
        ]
    lines += [
        f"    if b < 128: return {value}, p + 9",
        "    b = d[p + 9]",
        "    if b > 1: raise _too_long(p)",  # more bytes, or bits beyond the 64th
        "    z |= b << 63",
        f"    return {value}, p + 10",
    ]
    ns: dict[str, Any] = {"_too_long": _too_long}
    exec("\n".join(lines), ns)  # noqa: S102 - a fixed template
    return ns["read"]


def _too_long(p: int) -> AvroReadError:
    return AvroReadError(f"the varint at byte {p} is longer than 10 bytes or beyond 64 bits")


_uvarint = _varint_reader(zigzag=False)
_long = _varint_reader(zigzag=True)


def _size(d: bytes, p: int) -> tuple[int, int]:
    """(length at ``p``, position after it) when it is not one byte, or is negative."""
    n, p = _long(d, p)
    if n < 0:
        raise AvroReadError(f"negative length {n} at byte {p - 1}")
    return n, p


def _index(d: bytes, p: int) -> tuple[int, int]:
    """(unsigned varint at ``p``, position of its *last* byte): a union or enum index written
    in more than one byte, so that the code generated for the canonical one-byte form goes on
    reading at ``p + 1``."""
    z, p = _uvarint(d, p)
    return z, p - 1


def _bad_index(z: int, what: str) -> AvroReadError:
    return AvroReadError(f"index {(z >> 1) ^ -(z & 1)} is out of range for {what}")


def _bad_count(n: int, p: int, left: int) -> AvroReadError:
    return AvroReadError(f"a block of {n} items at byte {p} with only {left} bytes left")


def _malformed(exc: BaseException, d: bytes, p: int) -> AvroReadError:
    """The error for ``exc``, raised while reading the datum (``p``: where its field began)."""
    if isinstance(exc, AvroReadError):
        return exc
    if isinstance(exc, IndexError | struct.error):
        return AvroReadError(f"truncated: {len(d)} bytes end within a value after byte {p}")
    if isinstance(exc, UnicodeDecodeError):
        return AvroReadError(f"a string after byte {p} is not UTF-8: {exc.reason}")
    return AvroReadError(f"a value after byte {p} cannot be read: {type(exc).__name__}: {exc}")


def _leftover(d: bytes, p: int, start: int) -> AvroReadError:
    if p > len(d):
        return AvroReadError(
            f"truncated: the datum needs {p - start} bytes, {len(d) - start} given"
        )
    return AvroReadError(f"{len(d) - p} bytes left after the datum ({p - start} bytes)")


def _as_bytes(data: Any) -> bytes:
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"expected bytes to read Avro from, got {type(data).__name__}")


# --------------------------------------------------------------------------- logical types


def _decimal_reader(precision: Any, scale: Any) -> Callable[[bytes], Decimal]:
    """fastavro's read_decimal: the unscaled int rounded to ``precision`` digits, then scaled in
    a context of that precision (one context per reader: fastavro mutates a shared one)."""
    ctx = Context(prec=precision)  # raises for a precision fastavro cannot read either
    create, shift, from_bytes = ctx.create_decimal, -scale, int.from_bytes

    def read(payload: bytes) -> Decimal:
        return create(from_bytes(payload, "big", signed=True)).scaleb(shift, ctx)

    return read


def _logical_reader(schema: Any) -> Callable[[Any], Any] | None:
    """fastavro's conversion of a read value for ``schema``'s logical type, or None."""
    if not isinstance(schema, dict) or not schema.get("logicalType"):
        return None
    key = f"{schema['type']}-{schema['logicalType']}"
    if key in ("bytes-decimal", "fixed-decimal"):
        return _decimal_reader(schema["precision"], schema.get("scale", 0))
    convert = LOGICAL_READERS.get(key)
    if convert is None:
        return None
    if key == "string-uuid" and convert.__name__ == "read_uuid":
        return uuid.UUID
    return lambda v: convert(v, schema, None)


class _Unsupported(Exception):
    """A schema this module does not compile (fastavro reads it)."""
