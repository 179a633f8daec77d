"""Avro decimals (``bytes`` and ``fixed``) from ``Decimal`` values: the unscaled integer, exact
and fast for the common cases, with fastavro's checks of precision and scale."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

from schemas.avro_writer.checks import _as_bytes
from schemas.avro_writer.errors import AvroValueError

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
