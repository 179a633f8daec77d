"""The warehouse sink: a :class:`~materializers.core.sink.Sink` keeping one Delta table per source
table under a root directory (``<root>/<schema>/<table>``).

Per flush and table, one Delta commit (see batch.py): a MERGE of the last change of each key
(upserts and deletes), or an append of an unkeyed table's rows, or, after a truncate, an
overwrite with the rows that followed it; new columns are merged into the table's schema (a
column added with a default fills the rows already there first: delta.align).

**Offsets.** Each table's commit records the offsets of its topic's partitions as Delta
transaction identifiers (delta.py), atomically with the rows. Offsets no table commit can hold
go to ``<root>/_bottler_offsets``, an empty Delta table whose commits carry only transaction
identifiers: the truncate control topic's, and a table topic's while its table does not exist
(only deletes or truncates seen so far). That commit is made last in a flush.
``stored_offsets`` takes a topic-partition's offset from its table when the table has one, else
from ``_bottler_offsets`` (once a table exists, its commits carry its topic's offsets).

**Only its own tables.** A Delta table already at a table's path is written into only when it
holds a transaction identifier of the table's topic (bottler wrote it): a Delta table of the
user's there is refused with one line, never merged into nor overwritten by a truncate.

A crash between the commits of one flush leaves every table consistent with the offsets its
last commit recorded, so each resumes exactly where it stopped. Only the truncate topic can lag:
its events are then read again, and a truncate applied twice is harmless — the consumer loop
rewinds the table's topic to the truncate's barrier and replays what followed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

from deltalake import write_deltalake

from common.errors import BottlerError
from materializers.core.changes import Change, TableId, TopicPartition
from materializers.core.sink import Offsets
from materializers.warehouse.batch import Staged, table_batches
from materializers.warehouse.delta import (
    Commit,
    DeltaWriter,
    RustDeltaWriter,
    Source,
    _properties,
    claim,
    open_table,
    stored_offsets,
)

log = logging.getLogger(__name__)

OFFSETS_TABLE = "_bottler_offsets"


def table_path(root: Path, table: TableId) -> Path:
    return root / _safe(table.schema) / _safe(table.table)


def _safe(name: str) -> str:
    return name.replace("/", "%2F") if name not in (".", "..") else f"%{name}"


def delta_tables(root: Path) -> list[Path]:
    """The Delta tables under ``root`` (``<schema>/<table>``), the offsets table left out, and
    those of a prefix's subdirectory (``<prefix>/_bottler_offsets``, job.prefix_root) too."""
    if not root.is_dir():
        return []
    return sorted(p.parent for p in root.glob("*/*/_delta_log")
                  if p.is_dir() and p.parent.name != OFFSETS_TABLE)


class DeltaSink:
    """Writes changes into Delta tables under ``root`` through ``writer`` (delta-rs unless
    told). Counters: ``rows_written`` (source rows committed), ``commits``, ``flushes``."""

    def __init__(self, root: str | Path, writer: DeltaWriter | None = None):
        self.root = Path(root)
        self.writer = writer or RustDeltaWriter()
        self.rows_written = 0
        self.commits = 0
        self.flushes = 0
        self._pending: list[tuple[list[Commit], dict[TopicPartition, int]]] = []
        self._topic_paths: dict[str, Path] = {}  # table topic -> its table, once known
        self._own: set[Path] = set()  # table paths bottler wrote (or that were free)

    # -- the Sink protocol ---------------------------------------------------------------

    def stored_offsets(self, partitions: Sequence[TopicPartition]) -> Offsets:
        self._pending.clear()
        found: dict[TopicPartition, int] = {}
        for path in delta_tables(self.root):
            table = open_table(path)
            if table is None:
                continue
            for tp, offset in stored_offsets(table, partitions).items():
                found[tp] = offset
                self._topic_paths[tp[0]] = path
                self._own.add(path)
        rest = [tp for tp in partitions if tp not in found]
        offsets_table = open_table(self.root / OFFSETS_TABLE)
        if rest and offsets_table is not None:
            found.update(stored_offsets(offsets_table, rest))
        return found

    def write(self, changes: Sequence[Change], offsets: Offsets,
              staged: Mapping[TableId, Staged] | None = None) -> None:
        """The Sink protocol's write; ``staged``: tables' rows the warehouse job's executors
        staged as Parquet (staging.py), written from there, after ``changes`` (its truncates)."""
        commits = []
        routed: set[TopicPartition] = set()
        batches = table_batches(changes)
        staged = staged or {}
        for table in dict.fromkeys([*batches, *staged]):
            batch, rows = batches.get(table), staged.get(table)
            topics = (batch.topics if batch else set()) | (rows.topics if rows else set())
            path = table_path(self.root, table)
            for topic in topics:
                self._topic_paths[topic] = path
            mine = {tp: o for tp, o in offsets.items() if tp[0] in topics}
            self._check_own(path, table, mine)
            routed |= mine.keys()
            truncated = batch is not None and batch.truncated
            if rows is not None:
                keys, source, defaults = rows.keys, rows.source, rows.defaults
            else:
                keys = batch.key_columns() if batch.keyed else None
                source, defaults = Source.of(batch.source()), batch.defaults()
            commits.append(Commit(path, keys, truncated, source, mine, defaults))
        by_path: dict[Path, dict[TopicPartition, int]] = {}
        rest: dict[TopicPartition, int] = {}
        for tp, offset in offsets.items():
            if tp in routed:
                continue
            path = self._topic_paths.get(tp[0])
            if path is not None:  # a known table's topic moved without a change of it
                by_path.setdefault(path, {})[tp] = offset
            else:  # the truncate topic; a topic whose table is unknown
                rest[tp] = offset
        commits += [Commit(path, None, False, None, tps) for path, tps in by_path.items()]
        self._pending.append((commits, rest))

    def _check_own(self, path: Path, table: TableId, partitions: Offsets) -> None:
        """Refuse a Delta table at ``path`` that bottler did not write (see the module doc)."""
        if path in self._own:
            return
        existing = open_table(path)
        if existing is not None and not stored_offsets(existing, partitions):
            raise BottlerError(
                f"{path} holds a Delta table bottler did not write (no transaction identifier"
                f" of topic {', '.join(sorted({t for t, _ in partitions}))}): the warehouse"
                f" never writes into it (table {table})",
                "move it away, or give --path another directory")
        self._own.add(path)

    def flush(self) -> None:
        pending, self._pending = self._pending, []
        for commits, rest in pending:
            rest = dict(rest)
            for commit in commits:
                if self.writer.commit(commit):
                    self.commits += 1
                    if commit.source is not None:
                        self.rows_written += commit.source.rows
                else:  # no table to hold them (yet)
                    rest.update(commit.offsets)
            if rest:
                self._store_elsewhere(rest)
        self.flushes += 1

    def close(self) -> None:
        self._pending.clear()

    # -- the offsets table ---------------------------------------------------------------

    def _store_elsewhere(self, offsets: dict[TopicPartition, int]) -> None:
        import pyarrow as pa

        path = self.root / OFFSETS_TABLE
        claim(path)
        empty = pa.table({"note": pa.array([], pa.string())})
        write_deltalake(str(path), empty, mode="append", commit_properties=_properties(offsets))
        self.commits += 1
