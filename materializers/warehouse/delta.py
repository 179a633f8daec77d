"""The Delta writer: one interface, two engines.

- :class:`RustDeltaWriter` writes through ``deltalake`` (delta-rs): what runs here.
- :class:`SparkDeltaWriter` runs Delta Lake's own MERGE on Spark, where the delta-spark jars are
  on the Spark classpath (:func:`writer_for` picks it then).

Either way, a :class:`Commit` becomes Delta commits that carry the Kafka offsets they bring
their topic-partitions to as Delta *transaction identifiers* (``txn`` actions: app id
``bottler:<topic>:<partition>``, version = the next offset to read). Delta keeps the latest
version of every app id in the table's snapshot (checkpoints and log cleanup included), and any
Delta reader sees them; :func:`stored_offsets` reads them back with delta-rs for both engines.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import TableNotFoundError

from common.errors import BottlerError
from materializers.core.changes import TopicPartition
from materializers.warehouse.batch import DELETE

log = logging.getLogger(__name__)


def app_id(tp: TopicPartition) -> str:
    return f"bottler:{tp[0]}:{tp[1]}"


@dataclass
class Part:
    """Rows of one schema version a commit writes: ``batches()`` streams them (from memory, or
    from a Parquet file an executor staged); ``fill``: columns every row takes (one value each,
    the defaults of columns a later version of the batch added)."""

    schema: pa.Schema
    rows: int
    deletes: int  # rows flagged DELETE
    batches: Callable[[], Iterable[pa.RecordBatch]]
    fill: dict[str, pa.Array] = field(default_factory=dict)
    file: str | None = None  # the Parquet file staged, if any


class Source:
    """The rows a commit writes, as :class:`Part` s streamed one record batch at a time: the
    writer never holds them all (delta-rs merges from the stream)."""

    def __init__(self, parts: list[Part]):
        self.parts = [p for p in parts if p.rows]
        self.rows = sum(p.rows for p in self.parts)
        self.deletes = sum(p.deletes for p in self.parts)
        schemas = [pa.schema(list(p.schema) + [pa.field(n, a.type) for n, a in p.fill.items()
                                               if n not in p.schema.names])
                   for p in self.parts]
        self.schema = (pa.unify_schemas(schemas, promote_options="permissive") if schemas
                       else pa.schema([]))

    @classmethod
    def of(cls, table: pa.Table | None) -> Source | None:
        if table is None:
            return None
        deletes = pc.sum(table[DELETE]).as_py() or 0 if DELETE in table.column_names else 0
        return cls([Part(table.schema, table.num_rows, deletes, table.to_batches)])

    @property
    def upserts(self) -> int:
        return self.rows - self.deletes

    def reader(self, schema: pa.Schema, upserts_only: bool = False) -> pa.RecordBatchReader:
        """The rows shaped as ``schema`` (columns they lack: nulls; narrower types: cast up);
        ``upserts_only``: the deleted keys dropped (``schema`` has no DELETE column then)."""

        def batches() -> Iterator[pa.RecordBatch]:
            for part in self.parts:
                for batch in part.batches():
                    if upserts_only and DELETE in batch.schema.names:
                        batch = batch.filter(pc.invert(batch.column(DELETE)))
                    if batch.num_rows:
                        yield conform(batch, schema, part.fill)

        return pa.RecordBatchReader.from_batches(schema, batches())


def conform(batch: pa.RecordBatch, schema: pa.Schema,
            fill: Mapping[str, pa.Array] | None = None) -> pa.RecordBatch:
    """``batch`` as ``schema``: missing columns null (or ``fill``'s value), types cast."""
    n, names = batch.num_rows, batch.schema.names
    arrays = []
    for f in schema:
        if f.name in names:
            array = batch.column(f.name)
        elif fill and f.name in fill:
            array = pa.repeat(fill[f.name][0], n)
        else:
            array = pa.nulls(n, f.type)
        arrays.append(array if array.type == f.type else array.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass
class Commit:
    """What one table's flush writes: ``source`` (None: offsets only) merged on ``keys``
    (None: appended, the table has no key), after emptying the table if ``truncate``; and the
    offsets of its topic-partitions. ``defaults``: column -> the value (an array of one) the
    table's rows take when the column is new to the table (added with a default)."""

    path: Path
    keys: list[str] | None
    truncate: bool
    source: Source | None
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    defaults: dict[str, pa.Array] = field(default_factory=dict)


def without_flag(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f for f in schema if f.name != DELETE])


class DeltaWriter(Protocol):
    def commit(self, commit: Commit) -> bool:
        """Apply ``commit`` with its offsets, atomically (per topic-partition for Spark, see
        there). False if there was nothing to commit to: the table does not exist and the commit
        creates no rows (a delete or truncate of a table never written), so the offsets must be
        kept elsewhere."""
        ...


LOG = "_delta_log"
FOREIGN_HINT = ("bottler writes only into Delta tables it made, and deletes none of your files: "
                "move them away (or give --path a directory of its own), then run again")


def open_table(path: Path | str) -> DeltaTable | None:
    """The Delta table at ``path``; None where bottler may create one: nothing there, an empty
    directory, or one it claimed (:func:`claim`) before its first commit landed. Anything else
    is refused in one line, untouched: a file, a directory of other files, a table whose log
    cannot be read."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise BottlerError(f"the warehouse table path {path} is a file, not a Delta table "
                           "directory", FOREIGN_HINT)
    if not (path / LOG).exists():
        if path.is_dir() and (found := sorted(p.name for p in path.iterdir())):
            shown = ", ".join(found[:3]) + (", …" if len(found) > 3 else "")
            raise BottlerError(f"the warehouse table directory {path} holds files that are not "
                               f"a Delta table ({shown})", FOREIGN_HINT)
        return None
    try:
        return DeltaTable(str(path))
    except TableNotFoundError:
        return None  # claimed, its first commit not written yet (an empty log)
    except BaseException as exc:  # delta-rs's errors, its panics (PanicException) too
        if isinstance(exc, KeyboardInterrupt | SystemExit):
            raise
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BottlerError(
            f"the Delta table at {path} cannot be read ({reason})",
            "bottler deletes none of its files: repair its _delta_log, or move the directory "
            "away and run again, which rebuilds the table from the topics") from None


def claim(path: Path) -> None:
    """Mark ``path`` as a table bottler is making (an empty ``_delta_log``), before its first
    commit: files a failed first write leaves are then known to be its own. A path that is not
    free for a table is refused (see :func:`open_table`)."""
    if not (path / LOG).exists():
        open_table(path)
        (path / LOG).mkdir(parents=True, exist_ok=True)


def stored_offsets(table: DeltaTable, partitions: Iterable[TopicPartition]) -> dict:
    """``(topic, partition) -> next offset`` as the table's transaction identifiers record."""
    found = {}
    for tp in partitions:
        version = table.transaction_version(app_id(tp))
        if version is not None:
            found[tp] = version
    return found


def _properties(offsets: Mapping[TopicPartition, int], **extra: str) -> CommitProperties:
    return CommitProperties(
        app_transactions=[Transaction(app_id(tp), o) for tp, o in sorted(offsets.items())],
        custom_metadata={"bottler.offsets": json.dumps(
            {f"{t}:{p}": o for (t, p), o in sorted(offsets.items())}), **extra},
    )


def quote(column: str) -> str:
    """A column in a delta-rs (DataFusion) SQL predicate."""
    return '"' + column.replace('"', '""') + '"'


class RustDeltaWriter:
    """Delta commits through delta-rs: a MERGE for keyed tables, an append for unkeyed ones, an
    overwrite after a truncate; new columns merged into the table schema. The source is
    streamed into each (delta-rs reads the record batches as it goes)."""

    def commit(self, commit: Commit) -> bool:
        table = open_table(commit.path)
        source = commit.source
        props = _properties(commit.offsets)
        if table is None:
            if source is None or source.upserts == 0:
                return False  # no row to give the table its columns
            claim(commit.path)
            write_deltalake(str(commit.path),
                            source.reader(without_flag(source.schema), upserts_only=True),
                            mode="append", commit_properties=props)
            return True
        schema = None
        if source is not None:
            schema = align(table, source.schema, {} if commit.truncate else commit.defaults)
        before = table.version()
        if commit.truncate:
            data = (source.reader(without_flag(schema), upserts_only=True)
                    if source is not None else _empty(table))
            write_deltalake(table, data, mode="overwrite", schema_mode="merge",
                            commit_properties=props)
        elif source is not None and commit.keys is None:
            write_deltalake(table, source.reader(without_flag(schema), upserts_only=True),
                            mode="append", schema_mode="merge", commit_properties=props)
        elif source is not None:
            self._merge(table, commit, schema, props)
        if table.version() == before and open_table(commit.path).version() == before:
            # a MERGE that changed nothing commits nothing: record the offsets alone
            write_deltalake(commit.path, _empty(table), mode="append", commit_properties=props)
        return True

    @staticmethod
    def _merge(table: DeltaTable, commit: Commit, schema: pa.Schema,
               props: CommitProperties) -> None:
        source = commit.source
        on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in commit.keys)
        merger = table.merge(source.reader(schema), on, source_alias="s", target_alias="t",
                             merge_schema=True, commit_properties=props)
        if source.deletes:
            merger = merger.when_matched_delete(f"s.{DELETE}")
        if source.upserts:
            merger = merger.when_matched_update_all(
                predicate=f"NOT s.{DELETE}", except_cols=[DELETE]
            ).when_not_matched_insert_all(predicate=f"NOT s.{DELETE}", except_cols=[DELETE])
        merger.execute()


def _empty(table: DeltaTable) -> pa.Table:
    return table_schema(table).empty_table()


def table_schema(table: DeltaTable) -> pa.Schema:
    return pa.schema(table.schema().to_arrow())


# -- schema alignment and widening ------------------------------------------------------------


def align(table: DeltaTable, source: pa.Schema,
          defaults: Mapping[str, pa.Array] | None = None) -> pa.Schema:
    """The schema a ``source`` (of schema ``source``) is written as into ``table``: the table's
    columns, then the source's new ones. Table columns missing from the source (dropped at the
    source, or not in a delete's key) read null, so a merged row never keeps a dropped column's
    stale value; a source column narrower than the table's is cast up (a row written before a
    widening). A source column wider than the table's (``integer`` became ``bigint``) widens the
    table first, where Delta allows it; other type changes are refused. A new column with a
    default in ``defaults`` is added to the table first, its rows holding the default."""
    target = table_schema(table)
    widen = {}
    add = new_with_default(target, source, defaults)
    for name in source.names:
        if name not in target.names:
            continue  # a new column: the write merges it into the table schema
        have, want = target.field(name).type, source.field(name).type
        if have == want or _widens(want, have):
            continue
        if _widens(have, want):
            widen[name] = want
        else:
            raise BottlerError(
                f"column {name} of {table.table_uri} changed type from {have} to {want}",
                "Delta cannot convert it in place: move the table away and rebuild it "
                "(bottler materialize warehouse from offset 0 into a fresh path)")
    if widen or add:
        rewrite(table, widen, add)
        target = table_schema(table)
    return pa.schema(list(target) + [f for f in source if f.name not in target.names])


def new_with_default(target: pa.Schema, source: pa.Schema,
                     defaults: Mapping[str, pa.Array] | None) -> dict[str, pa.Array]:
    """The columns of ``source`` new to the table (schema ``target``) that have a default."""
    return {name: one for name, one in (defaults or {}).items()
            if name in source.names and name not in target.names}


_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]


def _widens(narrow: pa.DataType, wide: pa.DataType) -> bool:
    """Whether every value of ``narrow`` converts exactly to ``wide`` (Delta's type widening
    rules: integers up, float to double, decimals up keeping their scale, date to timestamp)."""
    if narrow in _INTS and wide in _INTS:
        return _INTS.index(narrow) < _INTS.index(wide)
    if narrow == pa.float32() and wide == pa.float64():
        return True
    if pa.types.is_decimal(narrow) and pa.types.is_decimal(wide):
        return (wide.scale >= narrow.scale
                and wide.precision - wide.scale >= narrow.precision - narrow.scale)
    if narrow in _INTS[:3] and pa.types.is_decimal(wide):
        return wide.precision - wide.scale >= 10
    return narrow == pa.date32() and wide == pa.timestamp("us")


def rewrite(table: DeltaTable, widen: Mapping[str, pa.DataType],
            add: Mapping[str, pa.Array] | None = None) -> None:
    """Rewrite the table with ``widen``'s columns cast to their wider types and ``add``'s
    columns added, every row holding the column's value (an array of one), in one commit that
    changes no row otherwise (delta-rs has neither in-place type widening nor a column default):
    the offsets recorded stay as they were."""
    add = add or {}
    data = table.to_pyarrow_table()
    for name, wide in widen.items():
        data = data.set_column(data.column_names.index(name), name, data[name].cast(wide))
    for name, one in add.items():
        data = data.append_column(name, pa.repeat(one[0], data.num_rows))
    if widen:
        log.info("widening %s: %s", table.table_uri,
                 ", ".join(f"{n} to {t}" for n, t in widen.items()))
    if add:
        log.info("adding %s to %s with their defaults on its %d rows", ", ".join(add),
                 table.table_uri, data.num_rows)
    metadata = {}
    if widen:
        metadata["bottler.widened"] = json.dumps({n: str(t) for n, t in widen.items()})
    if add:
        metadata["bottler.added"] = json.dumps(sorted(add))
    write_deltalake(table, data, mode="overwrite", schema_mode="overwrite",
                    commit_properties=CommitProperties(custom_metadata=metadata))
    table.update_incremental()


# -- delta-spark -----------------------------------------------------------------------------


def writer_for(spark: Any | None) -> DeltaWriter:
    """delta-spark's MERGE when its classes are on the Spark classpath, else delta-rs."""
    if spark is not None:
        try:
            spark._jvm.java.lang.Class.forName("io.delta.tables.DeltaTable")
        except Exception:  # noqa: BLE001 - py4j raises its own error for a missing class
            pass
        else:
            return SparkDeltaWriter(spark)
    return RustDeltaWriter()


class SparkDeltaWriter:
    """Delta Lake's own MERGE on Spark. Spark records one transaction identifier per commit
    (``spark.databricks.delta.write.txnAppId``/``txnVersion``), so a commit may cover one
    topic-partition: single-partition table topics (the capture's default)."""

    def __init__(self, spark: Any):
        self.spark = spark

    def commit(self, commit: Commit) -> bool:
        table = open_table(commit.path)
        if table is None and (commit.source is None or commit.source.upserts == 0):
            return False
        if table is None:
            claim(commit.path)
        if len(commit.offsets) > 1:
            raise BottlerError(
                f"{commit.path}: delta-spark records one transaction identifier per commit, "
                f"this one covers {len(commit.offsets)} topic-partitions",
                "use single-partition table topics, or the delta-rs writer (without the "
                "delta-spark jars on the classpath)")
        conf = self.spark.conf
        conf.set("spark.databricks.delta.schema.autoMerge.enabled", "true")
        for tp, offset in commit.offsets.items():
            conf.set("spark.databricks.delta.write.txnAppId", app_id(tp))
            conf.set("spark.databricks.delta.write.txnVersion", str(offset))
        if table is not None and commit.source is not None and not commit.truncate:
            add = new_with_default(table_schema(table), commit.source.schema, commit.defaults)
            if add:  # through delta-rs: one commit without offsets, before Spark's
                rewrite(table, {}, add)
        try:
            self._write(commit, table)
        finally:
            conf.unset("spark.databricks.delta.write.txnAppId")
            conf.unset("spark.databricks.delta.write.txnVersion")
        return True

    def _write(self, commit: Commit, table: DeltaTable | None) -> None:
        path = str(commit.path)
        frame = self._frame(commit.source, table)
        if commit.keys is None or commit.truncate or table is None:
            rows = frame.filter(f"NOT {DELETE}").drop(DELETE) if DELETE in frame.columns \
                else frame
            rows.write.format("delta").mode("overwrite" if commit.truncate else "append") \
                .option("mergeSchema", "true").save(path)
            return
        view = "bottler_merge_source"
        frame.createOrReplaceTempView(view)
        cols = [c for c in frame.columns if c != DELETE]
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in commit.keys)
        sets = ", ".join(f"t.`{c}` = s.`{c}`" for c in cols)
        names = ", ".join(f"`{c}`" for c in cols)
        values = ", ".join(f"s.`{c}`" for c in cols)
        self.spark.sql(
            f"MERGE INTO delta.`{path}` t USING {view} s ON {on} "
            f"WHEN MATCHED AND s.{DELETE} THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {sets} "
            f"WHEN NOT MATCHED AND NOT s.{DELETE} THEN INSERT ({names}) VALUES ({values})")

    def _frame(self, source: Source | None, table: DeltaTable | None) -> Any:
        """The source as a DataFrame: the executors' staged Parquet files read by Spark (the
        rows never pass through this process); a source in memory (the consumer loop's) as
        it is."""
        if source is None:
            return self.spark.createDataFrame(_empty(table))
        files = [p.file for p in source.parts if p.file is not None and not p.fill]
        if len(files) == len(source.parts):
            frames = [self.spark.read.parquet(f) for f in files]
            frame = frames[0]
            for other in frames[1:]:
                frame = frame.unionByName(other, allowMissingColumns=True)
            return frame
        return self.spark.createDataFrame(source.reader(source.schema).read_all())
