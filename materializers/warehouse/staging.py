"""A micro-batch's surviving rows, staged as Parquet by the Spark executors, so that no row passes
through the driver's Python heap.

**Executors** (:class:`StageWriter`, the write side of the ``bottler_stage`` Python data
source): each task takes its share of the deduplicated rows (the last event per key), turns them
into the Arrow rows Delta stores (batch.py, types.py: the same conversion the consumer loop's
sink uses) and writes them into the batch's staging directory, one Parquet file per topic, kind
(``upsert``, ``delete``, ``append``) and schema version, at most ``ROWS_PER_FILE`` rows each; the
file's metadata says what it holds. A change whose values Delta cannot hold is left out and
listed in a ``.poison.json`` file beside them, with undecodable messages.

**Driver** (:func:`read`): lists the directory and reads the files' footers (no rows), and
gives per table a :class:`~materializers.warehouse.batch.Staged` whose Source streams the files:
delta-rs merges from that stream, one record batch at a time.
"""

from __future__ import annotations

import json
import pickle
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceWriter, WriterCommitMessage

from materializers.core.changes import Change, TableId, table_of
from materializers.core.decode import Decoder
from materializers.core.sink import RejectedChange
from materializers.warehouse.batch import (
    DELETE,
    OFFSET,
    PARTITION,
    Staged,
    TableBatch,
    _names,
    _part,
)
from materializers.warehouse.delta import Part, Source
from materializers.warehouse.types import column_name

NAME = "bottler_stage"
ROWS_PER_FILE = 50_000  # an executor holds at most this many decoded rows per group
META = b"bottler"


@dataclass
class Poison:
    topic: str
    partition: int
    offset: int
    reason: str
    error: str  # DecodeError (undecodable) or RejectedChange (Delta cannot hold it)


def _kind(change: Change) -> str:
    if change.key is None:
        return "append"
    return "upsert" if change.op == "upsert" else "delete"


def _keys(change: Change) -> list[str] | None:
    if change.key is None:
        return None
    names = _names([change.value_schema])
    return [names.get(f["name"]) or column_name(f) for f in change.key_schema["fields"]]


def _arrow(kind: str, group: list[Change]) -> pa.Table:
    if kind == "upsert":
        return _part(group, lambda c: c.value, lambda c: c.value_schema, None,
                     lambda n: {DELETE: pa.array([False] * n)})
    if kind == "delete":
        return _part(group, lambda c: c.key, lambda c: c.key_schema,
                     _names([group[0].value_schema]) if group[0].value_schema else None,
                     lambda n: {DELETE: pa.array([True] * n)})
    return _part(group, lambda c: c.value, lambda c: c.value_schema, None,
                 lambda n, g=group: {PARTITION: pa.array([c.partition for c in g], pa.int32()),
                                     OFFSET: pa.array([c.offset for c in g], pa.int64())})


class StageWriter(DataSourceWriter):
    def __init__(self, options: dict[str, str]):
        from materializers.warehouse.source import from_option

        self.dir = Path(options["dir"])
        self.registry = from_option(options["registry"])  # a URL, or the client properties

    def write(self, rows: Iterator[Any]) -> WriterCommitMessage:
        from materializers.warehouse.source import decoder

        decode = decoder(self.registry)
        groups: dict[tuple, list[Change]] = {}
        poison: list[Poison] = []
        for row in rows:
            if row["op"] == "poison":
                poison.append(Poison(row["topic"], row["partition"], row["offset"],
                                     row["error"], "DecodeError"))
                continue
            change = _change(row, decode)
            if change is None:
                continue
            schema_id = change.key_schema_id if _kind(change) == "delete" else \
                change.value_schema_id
            group_key = (change.topic, change.table, _kind(change), schema_id)
            group = groups.setdefault(group_key, [])
            group.append(change)
            if len(group) >= ROWS_PER_FILE:
                self._file(group_key, groups.pop(group_key), poison)
        for group_key, group in groups.items():
            self._file(group_key, group, poison)
        if poison:
            (self.dir / f"{uuid.uuid4().hex}.poison.json").write_text(
                json.dumps([p.__dict__ for p in poison]))
        return WriterCommitMessage()

    def _file(self, group_key: tuple, group: list[Change], poison: list[Poison]) -> None:
        topic, table, kind, schema_id = group_key
        while group:
            try:
                data = _arrow(kind, group)
                break
            except RejectedChange as exc:  # set aside by the driver, the rest written
                c = exc.change
                poison.append(Poison(c.topic, c.partition, c.offset, exc.reason,
                                     "RejectedChange"))
                group = [x for x in group if x is not c]
        else:
            return
        meta = {"topic": topic, "table": [table.schema, table.table], "kind": kind,
                "schema_id": schema_id, "keys": _keys(group[-1]),
                "value_schema_id": group[-1].value_schema_id}
        data = data.replace_schema_metadata({META: json.dumps(meta).encode()})
        pq.write_table(data, self.dir / f"{uuid.uuid4().hex}.parquet")


def _change(row: Any, decode: Decoder) -> Change | None:
    key, value = pickle.loads(row["payload"])  # noqa: S301 - our own executors'
    kschema = decode.schema(row["key_schema_id"]) if row["key_schema_id"] is not None else None
    vschema = (decode.schema(row["value_schema_id"]) if row["value_schema_id"] is not None
               else None)
    writer = vschema if vschema is not None else kschema
    if "pg.table" not in writer.schema:
        return None  # not a table topic (business events, say): passed over
    if key is None and value is None:
        return None
    return Change(row["topic"], table_of(writer.schema), row["op"], key, value, row["partition"],
                  row["offset"], kschema.id if kschema else None, vschema.id if vschema else None,
                  kschema.schema if kschema else None, vschema.schema if vschema else None,
                  None, row["timestamp"])


class StageSink(DataSource):
    """``frame.write.format("bottler_stage").option("dir", …).option("registry", …)``."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema: Any, overwrite: bool) -> StageWriter:
        return StageWriter(self.options)


# -- the driver's side ---------------------------------------------------------------------


@dataclass
class Batch:
    tables: dict[TableId, Staged] = field(default_factory=dict)
    poison: list[Poison] = field(default_factory=list)
    rows: int = 0


def read(directory: Path, decode: Decoder) -> Batch:
    """What the executors staged in ``directory``: per table, its files as a streamed Source
    (footers read, no rows), and the changes set aside."""
    out = Batch()
    files: dict[TableId, list[tuple[dict, pq.FileMetaData, Path]]] = {}
    for path in sorted(directory.glob("*.parquet")):
        footer = pq.read_metadata(path)
        meta = json.loads(footer.metadata[META])
        files.setdefault(TableId(*meta["table"]), []).append((meta, footer, path))
    for path in sorted(directory.glob("*.poison.json")):
        out.poison += [Poison(**p) for p in json.loads(path.read_text())]
    for table, found in files.items():
        versions = TableBatch(table)  # the schema versions, oldest first (registry ids grow)
        for schema_id in sorted({m["value_schema_id"] for m, _, _ in found
                                 if m["value_schema_id"] is not None}):
            versions.schemas[schema_id] = decode.schema(schema_id).schema
        names = _names(versions.schemas.values())
        older = versions._older_rows(names)
        parts = []
        for meta, footer, path in found:
            rows = footer.num_rows
            parts.append(Part(footer.schema.to_arrow_schema(), rows,
                              rows if meta["kind"] == "delete" else 0,
                              lambda p=path: pq.ParquetFile(p).iter_batches(65_536),
                              {} if meta["kind"] == "delete" else
                              older.get(meta["value_schema_id"], {}),
                              str(path)))
            out.rows += rows
        keys = next((m["keys"] for m, _, _ in reversed(found) if m["keys"]), None)
        out.tables[table] = Staged({m["topic"] for m, _, _ in found}, keys, Source(parts),
                                   versions.defaults())
    return out
