"""What a translator author writes against: the change a translator sees, the events it returns,
and the declaration of its topics.

A translator is a plain function from one :class:`RowChange` to zero or more :class:`Event`,
declared with its input table topics and its output topics (with their Avro schemas) in a
:class:`Translator`. The runner (runner.py) feeds it and writes its events exactly once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from materializers.core.changes import TableId

RowOp = Literal["insert", "update", "delete", "upsert"]


@dataclass(frozen=True, slots=True)
class Source:
    """Where a change came from.

    ``timestamp`` is the Kafka message's timestamp (milliseconds since the epoch: when the
    capture produced it). ``lsn`` (the commit's WAL position) and ``commit_time`` (microseconds
    since the epoch) are read from the ``bottler.lsn`` / ``bottler.commit_time`` message headers
    when the capture writes them, else None.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int | None = None
    lsn: int | None = None
    commit_time: int | None = None


@dataclass(frozen=True, slots=True)
class RowChange:
    """One row change of an input table.

    - ``op``: with keyed state (the default), ``insert`` when no previous row of the key is
      known, ``update`` when one is, ``delete`` for a tombstone; without it, ``upsert`` or
      ``delete``.
    - ``key``: the primary key record (None for an unkeyed table); ``row``: the complete new row
      (None for a delete); ``before``: the previous row of the key as the translator last saw
      it (None for an insert, or without keyed state).

    Values are decoded as the materializers decode them (docs/materializers.md): timestamps are
    microseconds since the epoch, dates days since the epoch, decimals ``Decimal``.
    """

    table: TableId
    op: RowOp
    key: dict[str, Any] | None
    row: dict[str, Any] | None
    before: dict[str, Any] | None
    source: Source


@dataclass(frozen=True, slots=True)
class Event:
    """A business event: ``key`` and ``value`` are written with the output topic's key and value
    schemas. Where the value schema is a union of records (several event types in one topic,
    so that their order per key is kept), ``type`` names the record: its name or full name."""

    topic: str
    key: Any
    value: Any
    type: str | None = None


@dataclass(frozen=True, slots=True)
class Output:
    """An output topic and its Avro schemas (registered under ``<topic>-key`` and
    ``<topic>-value``). Events are partitioned by key (murmur2, as Java clients do), so the
    events of one key keep their order. Created if missing, never compacted."""

    topic: str
    key_schema: Mapping[str, Any] | str
    value_schema: Mapping[str, Any] | Sequence[Any] | str
    partitions: int = 1


Translate = Callable[[RowChange], Iterable[Event]]


@dataclass(frozen=True)
class Translator:
    """A translator's declaration.

    ``inputs`` are table topics as the capture names them without its ``--topic-prefix``
    (``orders``, ``sales.orders``); ``outputs`` its topics, without the output prefix.
    ``keep_previous``: keep the last row of every key (in memory, backed by a compacted
    changelog topic written in the same transactions) and pass it as ``RowChange.before``.
    """

    name: str
    inputs: Sequence[str]
    outputs: Sequence[Output]
    translate: Translate
    keep_previous: bool = True
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ValueError(f"translator {self.name!r} declares no input topics")
        if not self.outputs:
            raise ValueError(f"translator {self.name!r} declares no output topics")
        topics = [o.topic for o in self.outputs]
        if len(set(topics)) != len(topics):
            raise ValueError(f"translator {self.name!r} declares an output topic twice")
