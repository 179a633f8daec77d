"""The change a materializer applies: one per table message, one per truncate event."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

Op = Literal["upsert", "delete", "truncate"]
TopicPartition = tuple[str, int]
"""``(topic, partition)``: the key of every offsets mapping in the core."""


class TableId(NamedTuple):
    """The source table a topic describes: its PostgreSQL schema and table names, unsanitised
    (the ``pg.schema``/``pg.table`` attributes of the Avro records)."""

    schema: str
    table: str

    def __str__(self) -> str:
        return f"{self.schema}.{self.table}"


def table_of(record_schema: Mapping[str, Any]) -> TableId:
    """The table of a key or value record schema: its ``pg.schema``/``pg.table`` attributes, or
    else its namespace (a key record's ``<schema>.key`` trimmed) and name."""
    schema = record_schema.get("pg.schema")
    table = record_schema.get("pg.table")
    if schema is None or table is None:
        name = record_schema.get("name", "")
        namespace = record_schema.get("namespace")
        if namespace is None and "." in name:
            namespace, name = name.rsplit(".", 1)
        namespace = namespace or "public"
        schema = namespace.removesuffix(".key") if namespace.endswith(".key") else namespace
        table = name
    return TableId(schema, table)


def freeze(value: Any) -> Any:
    """A hashable form of a decoded Avro value (dicts and lists become sorted tuples and tuples):
    how a key dict becomes a dictionary key."""
    if isinstance(value, dict):
        if len(value) == 1:  # the usual one-column key: no sort, no generator
            for k, v in value.items():
                return ((k, freeze(v) if isinstance(v, dict | list) else v),)
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    return value


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs 2x, per message
class Change:
    """One change to apply to a target.

    - ``upsert``: ``value`` is the complete new row (``key`` the primary key, or None for an
      unkeyed table: then every upsert is a new row, identified by ``(topic, partition, offset)``).
    - ``delete``: a tombstone; ``key`` is the row's key, ``value`` is None.
    - ``truncate``: every row of ``table`` goes; ``key``/``value`` are None, ``topic`` is the
      *table* topic, ``partition``/``offset`` are the truncate event's place in the control
      topic and ``barrier`` the table topic's end offset per partition at the truncate (every
      message of ``topic`` before it is void; the loop has already ordered the change after
      those and before every later one).

    Values are decoded with the writer schema *without* date/time logical types
    (:func:`schemas.avro_schema.without_logical_types`): dates are days since 1970-01-01,
    timestamps and times microseconds, as ints (infinity and BC dates included); decimals are
    ``decimal.Decimal``; everything else as fastavro reads it. ``value_schema``/``key_schema``
    are the writer schemas (parsed JSON, with the ``pg.*`` attributes), and ``*_schema_id`` their
    registry ids, so a sink can follow schema versions (an id it has not seen is a new version).
    """

    topic: str
    table: TableId
    op: Op
    key: dict[str, Any] | None
    value: dict[str, Any] | None
    partition: int
    offset: int
    key_schema_id: int | None = None
    value_schema_id: int | None = None
    key_schema: dict[str, Any] | None = None
    value_schema: dict[str, Any] | None = None
    barrier: Mapping[int, int] | None = None
    timestamp: int | None = None

    @property
    def position(self) -> tuple[str, int, int]:
        """``(topic, partition, offset)`` of the message this change came from."""
        return (self.topic, self.partition, self.offset)

    @property
    def identity(self) -> Any:
        """A hashable identity of the row: the frozen key, or for an unkeyed row its position."""
        if self.key is not None:
            return freeze(self.key)
        return ("@", self.topic, self.partition, self.offset)
