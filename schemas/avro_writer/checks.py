"""What the generated code calls when a value is not of the exact class it expects: conversions
fastavro makes too, and the errors of values a schema cannot hold."""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from typing import Any

from schemas.avro_writer.errors import AvroTypeError, AvroValueError, _show

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
