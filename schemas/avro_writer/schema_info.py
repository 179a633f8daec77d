"""What the compiler asks of a parsed schema: its type, its logical type (fastavro's key), and a
short description for error messages."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import Any

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
