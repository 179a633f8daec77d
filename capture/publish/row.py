"""A row as PostgreSQL gave it, each column's text: what a dead letter holds of a row the capture
could not publish (capture/publish/dead_letters.py)."""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from capture.source.messages import UNCHANGED
from common.lsn import Lsn

if TYPE_CHECKING:
    from capture.publish.encoding import CodecSpec


class Row:
    """A row as PostgreSQL gave it (each column's text), for its dead letter. Made only for rows
    that fail, or that are large enough to be refused by the broker (Publisher.at_risk)."""

    __slots__ = ("columns", "commit_time", "key_columns", "lsn", "op", "table", "topic", "values")

    def __init__(self, table: str, topic: str | None, columns: tuple[str, ...],
                 key_columns: tuple[str, ...], values: tuple | None, op: str,
                 lsn: int | None = None, commit_time: bytes | None = None):
        self.table, self.topic, self.op = table, topic, op
        self.columns, self.key_columns, self.values = columns, key_columns, values
        self.lsn, self.commit_time = lsn, commit_time

    @classmethod
    def of(cls, spec: CodecSpec, values: tuple | None, op: str, lsn: int | None = None,
           commit_time: bytes | None = None) -> Row:
        """``values``: the new row's texts, or for a delete the old key's."""
        return cls(f"{spec.schema}.{spec.table}", spec.topic, tuple(c.name for c in spec.columns),
                   spec.key_columns, values, op, lsn, commit_time)

    def key(self) -> dict | None:
        if self.values is None or not self.key_columns:
            return None
        by_name = dict(zip(self.columns, self.values, strict=False))
        return {name: _text(by_name.get(name)) for name in self.key_columns}

    def record(self, reason: str, slot: str) -> dict:
        deleted = self.op == "delete"
        values = self.values or ()
        return {
            "table": self.table, "topic": self.topic, "op": self.op, "key": self.key(),
            # a delete carries only its key; NULL is null
            "columns": None if deleted or self.values is None else {
                name: _text(v) for name, v in zip(self.columns, values, strict=False)},
            "unchanged": [name for name, v in zip(self.columns, values, strict=False)
                          if v is UNCHANGED],  # TOASTed values the WAL did not carry
            "lsn": self.lsn, "lsn_text": None if self.lsn is None else str(Lsn(self.lsn)),
            "commit_time": int(self.commit_time) if self.commit_time else None,
            "reason": reason, "slot": slot,
        }


def _text(value):
    if value is None or value is UNCHANGED:
        return None
    return value if isinstance(value, str) else base64.b64encode(value).decode()
