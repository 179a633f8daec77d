"""Rows as search documents: the ``_id`` of a row, its document and the mapping of its table.

One index may hold several tables. Every document carries its table in ``_bottler_table``
(``schema.table``), which truncates delete by; its ``_id`` is ``<schema.table>:<key>``, the key
being the primary key's value as text (a one-column key: the value itself, ``public.items:42``;
several columns: a JSON array, ``public.order_items:[7,3]``). An ``_id`` that would be over the
cluster's 512-byte limit is replaced by a hash of it (``public.items:#<sha256>``). An unkeyed
table's rows are appended: each message is one document,
``<schema.table>:@<topic>/<partition>/<offset>``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from common.errors import BottlerError
from materializers.core.changes import Change
from materializers.search.fields import Converter, field_shape, plain_json
from schemas.avro_names import resolve_names

TABLE_FIELD = "_bottler_table"
MAX_ID_BYTES = 512

Transform = Callable[[dict[str, Any], Change], "dict[str, Any] | None"]


@dataclass(frozen=True)
class Layout:
    """One value schema version of a table: its fields' mapping and how rows become docs."""

    properties: dict[str, Any]
    fields: tuple[tuple[str, str, Converter | None], ...]  # (Avro field, column name, converter)

    @classmethod
    def of(cls, value_schema: dict[str, Any], flattened: str) -> Layout:
        value_schema, named = resolve_names(value_schema)
        properties: dict[str, Any] = {}
        fields = []
        for f in value_schema["fields"]:
            mapping, convert = field_shape(f["type"], f.get("pg.type", ""), named, flattened)
            column = f.get("pg.name", f["name"])
            properties[column] = mapping
            fields.append((f["name"], column, convert))
        return cls(properties, tuple(fields))

    def document(self, row: dict[str, Any], table: str) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        get = row.get
        for name, column, convert in self.fields:
            value = get(name)
            doc[column] = value if value is None or convert is None else convert(value)
        doc[TABLE_FIELD] = table
        return doc

    def columns(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` (decoded, by Avro field name) as document fields: column -> JSON."""
        return {column: values[name] if values[name] is None or convert is None
                else convert(values[name])
                for name, column, convert in self.fields if name in values}


def key_text(key: dict[str, Any]) -> str:
    """The primary key as text: a one-column key's value, else a JSON array of the values."""
    if len(key) == 1:  # the common key, per row: an integer or a text
        value, = key.values()
        if value.__class__ is int or value.__class__ is str:
            return str(value)
    values = [plain_json(v) for v in key.values()]
    if len(values) == 1 and isinstance(values[0], str | int) and not isinstance(values[0], bool):
        return str(values[0])
    return json.dumps(values, separators=(",", ":"), ensure_ascii=False)


def document_id(change: Change) -> str:
    table = str(change.table)
    if change.key is None:
        return f"{table}:@{change.topic}/{change.partition}/{change.offset}"
    doc_id = f"{table}:{key_text(change.key)}"
    if len(doc_id.encode()) > MAX_ID_BYTES:
        return f"{table}:#{hashlib.sha256(doc_id.encode()).hexdigest()}"
    return doc_id


def load_transform(spec: str) -> Transform:
    """``module:function`` → the function, called as ``function(doc, change)`` for every row:
    it returns the document to index (the same dict changed, or a new one), or None to keep the
    row out of the index (as if deleted)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise BottlerError(f"--transform {spec!r} is not module:function",
                           "e.g. --transform myproject.search:shape_product")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BottlerError(f"cannot import the transform's module {module_name!r}: {exc}",
                           "put it on PYTHONPATH (or install it) where bottler runs") from exc
    function = getattr(module, attr, None)
    if not callable(function):
        raise BottlerError(f"{module_name} has no function {attr!r}",
                           "--transform takes module:function")
    return function
