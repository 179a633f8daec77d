"""Named Avro types (records, enums, fixed) and references to them: the one schema walk every
view uses to find what a field's type names.

The rule is the Avro specification's (and fastavro's, which decodes the messages): a named type's
full name is its ``name`` when that holds a dot, else ``namespace.name`` with its own
``namespace`` or, without one, the namespace of the named type enclosing it (none: the name
alone). A reference by a dotted name is a full name; a reference by a short name is resolved in
the enclosing namespace. A short name is never looked up on its own: two types of one schema may
share a short name in different namespaces.

:func:`resolve_names` gives a copy of a schema whose references are all full names, with its named
types by full name, so that a view resolves a reference by one dictionary lookup wherever it
meets it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRIMITIVES", "full_name", "resolve_names"]

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
_NAMED = ("record", "enum", "fixed")
_COMPLEX = frozenset({*_NAMED, "array", "map"})


def full_name(name: str, namespace: str | None) -> str:
    """The full name of a type (or a reference) ``name`` in ``namespace``."""
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def resolve_names(schema: Any, namespace: str = "") -> tuple[Any, dict[str, dict]]:
    """(``schema`` with every reference to a named type as its full name, every named type it
    defines by full name). ``namespace``: the one enclosing ``schema``, if any. The input is not
    changed; the named types in the answer are the copies inside the returned schema, each with
    its own ``namespace`` set, so it can be read on its own."""
    named: dict[str, dict] = {}
    return _qualified(schema, namespace, named), named


def _qualified(schema: Any, namespace: str, named: dict[str, dict]) -> Any:
    if isinstance(schema, str):
        return schema if schema in PRIMITIVES else full_name(schema, namespace)
    if isinstance(schema, list):
        return [_qualified(branch, namespace, named) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind in _NAMED and "name" in schema:
        full = full_name(schema["name"], schema.get("namespace", namespace))
        own = full.rpartition(".")[0]
        out = {**schema, "namespace": own}
        named.setdefault(full, out)  # before its fields: a record may refer to itself
        if kind == "record":
            out["fields"] = [{**f, "type": _qualified(f["type"], own, named)}
                             for f in schema.get("fields", ())]
        return out
    if kind == "array":
        return {**schema, "items": _qualified(schema["items"], namespace, named)}
    if kind == "map":
        return {**schema, "values": _qualified(schema["values"], namespace, named)}
    if isinstance(kind, dict | list) or (isinstance(kind, str) and kind not in _COMPLEX):
        return {**schema, "type": _qualified(kind, namespace, named)}  # {"type": <a type>}
    return schema
