"""An in-memory reference sink: tables as dicts, offsets stored with the data.

The reference for the conformance suite: the simplest correct target. ``write`` only stages a
batch; ``flush`` applies it and its offsets at once, so an exception anywhere before the end of
``flush`` leaves the durable state as it was. A column added with a default gives it to the rows
already there that lack it (schemas.evolution), when a change first brings the column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from materializers.core.changes import Change, TableId, TopicPartition
from materializers.core.sink import Offsets, RejectedChange
from schemas.evolution import Evolution


class MemorySink:
    """``tables``: table → row identity (frozen key) → row; ``offsets``: durable offsets.

    ``reject`` (tests): a function returning a reason to refuse a change, or None.
    Counters: ``writes`` (changes applied by flushes), ``flushes``, ``truncates``.
    """

    def __init__(self, reject: Callable[[Change], str | None] | None = None):
        self.tables: dict[TableId, dict[Any, dict[str, Any]]] = {}
        self.offsets: dict[TopicPartition, int] = {}
        self.schema_ids: dict[TableId, int] = {}  # last value schema id applied, per table
        self.writes = 0
        self.flushes = 0
        self.truncates = 0
        self.reject = reject
        self._staged: list[Change] = []
        self._staged_offsets: dict[TopicPartition, int] = {}
        self._evolutions: dict[TableId, Evolution] = {}

    def stored_offsets(self, partitions: Sequence[TopicPartition]) -> Offsets | None:
        self._discard()
        return {tp: self.offsets[tp] for tp in partitions if tp in self.offsets}

    def write(self, changes: Sequence[Change], offsets: Offsets) -> None:
        if self.reject is not None:
            for change in changes:
                reason = self.reject(change)
                if reason is not None:
                    self._discard()
                    raise RejectedChange(change, reason)
        self._staged.extend(changes)
        self._staged_offsets.update(offsets)

    def flush(self) -> None:
        for change in self._staged:
            table = self.tables.setdefault(change.table, {})
            if change.op == "truncate":
                table.clear()
                self.truncates += 1
            elif change.op == "delete":
                table.pop(change.identity, None)
            else:
                if change.value_schema is not None:
                    self._evolve(table, change)
                table[change.identity] = change.value
                if change.value_schema_id is not None:
                    self.schema_ids[change.table] = change.value_schema_id
        self.writes += len(self._staged)
        self.offsets.update(self._staged_offsets)
        self.flushes += 1
        self._discard()

    def close(self) -> None:
        self._discard()

    def _evolve(self, rows: dict[Any, dict[str, Any]], change: Change) -> None:
        evolution = self._evolutions.setdefault(change.table, Evolution())
        for name, value in evolution.added(change.value_schema).items():
            for identity, row in rows.items():
                if name not in row:
                    rows[identity] = {**row, name: value}

    def rows(self, schema: str, table: str) -> dict[Any, dict[str, Any]]:
        """The rows of one table (identity → row); empty if never seen."""
        return self.tables.get(TableId(schema, table), {})

    def _discard(self) -> None:
        self._staged = []
        self._staged_offsets = {}
