"""A batch of changes cut per table into what one Delta commit applies: the last change of each
key, the upserts of unkeyed tables, whether the table is truncated first; and the Arrow source
table the commit merges.

A truncate voids everything of its table that came before it, so a table's commit is either a
MERGE (or, unkeyed, an append) of the changes, or, after a truncate, an overwrite of the table
with the rows that came after the truncate: one commit either way.

A column added with a default (schemas.evolution): the rows of a schema version older than a
column that a later version of the batch adds hold its default; :meth:`TableBatch.defaults` gives
the defaults the writer fills the table's existing rows with when it adds the column.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from materializers.core.changes import Change, TableId
from materializers.core.sink import RejectedChange
from materializers.warehouse.types import RecordLayout, column_name
from schemas.evolution import missing_values, older_rows

DELETE = "_bottler_delete"  # the source's flag column: this key is deleted
PARTITION, OFFSET = "_bottler_partition", "_bottler_offset"  # an unkeyed row's identity


@dataclass
class Staged:
    """A table's rows of a batch that the warehouse job's executors staged (staging.py): its
    topics, key columns (None: unkeyed), the rows as a streamed Source (delta.Source), and the
    defaults of added columns (as :meth:`TableBatch.defaults`)."""

    topics: set[str]
    keys: list[str] | None
    source: Any
    defaults: dict[str, pa.Array] = field(default_factory=dict)


@dataclass
class TableBatch:
    """What one flush does to one table."""

    table: TableId
    truncated: bool = False
    rows: dict[Any, Change] = field(default_factory=dict)  # keyed: identity -> last change
    appended: list[Change] = field(default_factory=list)  # unkeyed upserts, in order
    topics: set[str] = field(default_factory=set)
    schemas: dict[Any, dict] = field(default_factory=dict)  # upserts' value schemas, in order

    def add(self, change: Change) -> None:
        self.topics.add(change.topic)
        if change.op == "upsert" and change.value_schema is not None:
            self.schemas.setdefault(change.value_schema_id, change.value_schema)
        if change.op == "truncate":
            self.truncated = True
            self.rows.clear()
            self.appended.clear()
        elif change.key is None:
            if change.op == "upsert":
                self.appended.append(change)
        else:
            self.rows[change.identity] = change

    @property
    def keyed(self) -> bool:
        return bool(self.rows)

    def key_columns(self) -> list[str]:
        last = next(reversed(self.rows.values()))
        names = _names(c.value_schema for c in self.rows.values() if c.op == "upsert")
        return [names.get(f["name"]) or column_name(f) for f in last.key_schema["fields"]]

    def source(self) -> pa.Table | None:
        """The Arrow table the commit writes: keyed, one row per key with the ``DELETE`` flag
        (deleted keys carry their key columns only); unkeyed, the rows with their ``PARTITION``
        and ``OFFSET``. None when there is nothing to write. RejectedChange for a change whose
        values Delta cannot hold."""
        if self.rows:
            changes = list(self.rows.values())
            upserts = [c for c in changes if c.op == "upsert"]
            names = _names(c.value_schema for c in upserts)
            deletes = [c for c in changes if c.op == "delete"]
            older = self._older_rows(names)
            parts = [_part(group, lambda c: c.value, lambda c: c.value_schema, None,
                           lambda n, g=group: {
                               DELETE: pa.array([False] * n),
                               **_repeat(older.get(g[0].value_schema_id, {}), n)})
                     for group in _by(upserts, lambda c: c.value_schema_id)]
            parts += [_part(group, lambda c: c.key, lambda c: c.key_schema, names,
                            lambda n: {DELETE: pa.array([True] * n)})
                      for group in _by(deletes, lambda c: c.key_schema_id)]
            return _concat(parts)
        if self.appended:
            older = self._older_rows(_names(c.value_schema for c in self.appended))
            parts = [_part(group, lambda c: c.value, lambda c: c.value_schema, None,
                           lambda n, g=group: {
                               PARTITION: pa.array([c.partition for c in g], pa.int32()),
                               OFFSET: pa.array([c.offset for c in g], pa.int64()),
                               **_repeat(older.get(g[0].value_schema_id, {}), n)})
                     for group in _by(self.appended, lambda c: c.value_schema_id)]
            return _concat(parts)
        return None


    def defaults(self) -> dict[str, pa.Array]:
        """Delta column -> its default (an array of one value) for the columns of the batch's
        schema versions added with one (``pg.missing``): what the table's rows take when the
        column is new to the table. The latest version carrying a column says it."""
        out: dict[str, pa.Array] = {}
        for schema in self.schemas.values():
            values = missing_values(schema)
            if values:
                out.update(_columns(schema, values, 1))
        return out

    def _older_rows(self, names: dict[str, str]) -> dict[Any, dict[str, pa.Array]]:
        """Per value schema id: the columns a later version of the batch adds with a default,
        as ``column -> the default`` (one value), for that version's rows."""
        ids = list(self.schemas)
        out: dict[Any, dict[str, pa.Array]] = {}
        for schema_id, adds in zip(ids, older_rows(list(self.schemas.values())), strict=True):
            for name, (schema, value) in adds.items():
                out.setdefault(schema_id, {}).update(_columns(schema, {name: value}, 1, names))
        return out


def _columns(schema: dict, values: dict[str, Any], n: int,
             names: dict[str, str] | None = None) -> dict[str, pa.Array]:
    """``values`` (decoded, by Avro field name) as Delta columns of ``n`` equal values."""
    layout = RecordLayout(schema, names)
    return {column: m.array([values[field]] * n)
            for field, column, m in layout.fields if field in values}


def _repeat(columns: dict[str, pa.Array], n: int) -> dict[str, pa.Array]:
    return {column: pa.repeat(one[0], n) for column, one in columns.items()}


def table_batches(changes: Sequence[Change]) -> dict[TableId, TableBatch]:
    """The changes of a batch per table, in first-seen order."""
    batches: dict[TableId, TableBatch] = {}
    for change in changes:
        batch = batches.get(change.table)
        if batch is None:
            batch = batches[change.table] = TableBatch(change.table)
        batch.add(change)
    return batches


def _names(schemas: Iterable[dict | None]) -> dict[str, str]:
    """Avro field name -> Delta column, from the value schemas (the latest wins): how a key
    record's fields (which carry no ``pg.name``) find their columns."""
    names: dict[str, str] = {}
    for schema in {id(s): s for s in schemas}.values():  # a few versions among many changes
        if schema is not None:
            names.update((f["name"], column_name(f)) for f in schema["fields"])
    return names


def _by(changes: list[Change], key) -> list[list[Change]]:
    groups: dict[Any, list[Change]] = {}
    for change in changes:
        groups.setdefault(key(change), []).append(change)
    return list(groups.values())


def _part(changes: list[Change], row, schema, names, extra) -> pa.Table:
    layout = RecordLayout(schema(changes[0]), names)
    rows = [row(c) for c in changes]
    try:
        return layout.table(rows, extra(len(rows)))
    except (ValueError, TypeError, ArithmeticError, pa.ArrowException) as exc:
        found = layout.bad_row(rows)
        if found is None:
            raise
        index, reason = found
        raise RejectedChange(changes[index], reason) from exc


def _concat(parts: list[pa.Table]) -> pa.Table:
    if len(parts) == 1:
        return parts[0]
    return pa.concat_tables(parts, promote_options="permissive")
