"""A batch of changes cut per table into what one Delta commit applies: the last change of each
key, the upserts of unkeyed tables, whether the table is truncated first; and the Arrow source
table the commit merges.

A truncate voids everything of its table that came before it, so a table's commit is either a
MERGE (or, unkeyed, an append) of the changes, or, after a truncate, an overwrite of the table
with the rows that came after the truncate: one commit either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from materializers.core.changes import Change, TableId
from materializers.core.sink import RejectedChange
from materializers.warehouse.types import RecordLayout, column_name

DELETE = "_bottler_delete"  # the source's flag column: this key is deleted
PARTITION, OFFSET = "_bottler_partition", "_bottler_offset"  # an unkeyed row's identity


@dataclass
class TableBatch:
    """What one flush does to one table."""

    table: TableId
    truncated: bool = False
    rows: dict[Any, Change] = field(default_factory=dict)  # keyed: identity -> last change
    appended: list[Change] = field(default_factory=list)  # unkeyed upserts, in order
    topics: set[str] = field(default_factory=set)

    def add(self, change: Change) -> None:
        self.topics.add(change.topic)
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
            parts = [_part(group, lambda c: c.value, lambda c: c.value_schema, None,
                           lambda n: {DELETE: pa.array([False] * n)})
                     for group in _by(upserts, lambda c: c.value_schema_id)]
            parts += [_part(group, lambda c: c.key, lambda c: c.key_schema, names,
                            lambda n: {DELETE: pa.array([True] * n)})
                      for group in _by(deletes, lambda c: c.key_schema_id)]
            return _concat(parts)
        if self.appended:
            parts = [_part(group, lambda c: c.value, lambda c: c.value_schema, None,
                           lambda n, g=group: {
                               PARTITION: pa.array([c.partition for c in g], pa.int32()),
                               OFFSET: pa.array([c.offset for c in g], pa.int64())})
                     for group in _by(self.appended, lambda c: c.value_schema_id)]
            return _concat(parts)
        return None


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
