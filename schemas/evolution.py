"""Schema evolution: the one rule every view applies to a column added with a default.

PostgreSQL gives the rows already in a table the default of a column added with a non-volatile
default (``ALTER TABLE accounts ADD COLUMN region text DEFAULT 'eu'``) without writing them
again (``pg_attribute.attmissingval``): no message ever brings those rows' value. The capture
writes it into the column's field of the value schema as ``pg.missing``, the value's text
(docs/type-mapping.md). Every view applies it the same way:

- when a view meets a value schema version whose field carries ``pg.missing`` and the previous
  version it met had no such field, every row of that table it holds without the column takes
  the value (the replica's ``ADD COLUMN … DEFAULT``, the warehouse's rewrite of its Delta table,
  the search index's update of the table's documents that lack the field);
- a row written with a version older than the column (read in the same batch as the version that
  adds it) takes the value too;
- rows written with the column keep their own value, NULL included.

:func:`missing_values` reads the values, :class:`Evolution` follows one table's versions for a
view that applies them as it meets them, :func:`older_rows` says it for the versions of a batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from schemas.avro_names import resolve_names
from schemas.pgtypes import text_parser

__all__ = ["Evolution", "missing_values", "older_rows"]


def missing_values(schema: dict) -> dict[str, Any]:
    """Avro field name → the value the rows older than its column hold, decoded as a view
    decodes messages (dates in days, timestamps in microseconds, ``Decimal``…), for the fields of
    the value record ``schema`` that carry ``pg.missing``."""
    fields = [f for f in schema["fields"] if f.get("pg.missing") is not None]
    if not fields:
        return {}
    resolved, named = resolve_names(schema)
    by_name = {f["name"]: f for f in resolved["fields"]}
    out = {}
    for f in fields:
        field = by_name[f["name"]]
        try:
            out[f["name"]] = text_parser(field["type"], named, field.get("pg.type", ""))(
                field["pg.missing"])
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise ValueError(
                f"pg.missing {field['pg.missing']!r} of field {f['name']!r} does not read as "
                f"its type {field.get('pg.type') or field['type']!r}: {exc}") from exc
    return out


class Evolution:
    """One table's value schema versions in the order a view meets them."""

    def __init__(self) -> None:
        self._fields: frozenset[str] | None = None  # None: none met yet (the view just started)
        self._schema: dict | None = None  # the last version met, as the decoder shares it

    def added(self, schema: dict) -> dict[str, Any]:
        """The fields of ``schema`` that carry ``pg.missing`` and that the previous version met
        did not have (all of them for the first version met: a view that just started cannot
        tell, and applying the value again to the rows without the column is harmless), with
        their values."""
        if schema is self._schema:  # every row of a version: the views ask per row
            return {}
        self._schema = schema
        fields = frozenset(f["name"] for f in schema["fields"])
        known, self._fields = self._fields, fields
        if known == fields:
            return {}
        return {name: value for name, value in missing_values(schema).items()
                if known is None or name not in known}


def older_rows(schemas: Sequence[dict]) -> list[dict[str, tuple[dict, Any]]]:
    """For value schema versions in the order they came (one table's, in one batch): per
    version, the columns a later version adds with ``pg.missing`` and this one has not, as
    ``field name -> (the schema adding it, the value)``: what its rows hold there."""
    out: list[dict[str, tuple[dict, Any]]] = [{} for _ in schemas]
    for j in range(len(schemas) - 1, 0, -1):
        values = missing_values(schemas[j])
        if not values:
            continue
        for i in range(j):
            have = {f["name"] for f in schemas[i]["fields"]}
            for name, value in values.items():
                if name not in have:
                    out[i].setdefault(name, (schemas[j], value))
    return out
