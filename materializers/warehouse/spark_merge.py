"""One table topic's Delta commits on the spark route (native.py), with delta-spark.

**One commit per topic-partition.** delta-spark records one transaction identifier per commit
(``txnAppId``/``txnVersion``), so each partition of the topic that moved gets a commit of its
own, recording that partition's next offset: the last change of each of its keys (by offset)
merged (``whenMatchedDelete`` for deletes, ``whenMatchedUpdate``/``whenNotMatchedInsert`` of
the rows' columns for upserts), or the table's first rows appended, or an unkeyed table's rows
appended with their place. A key's changes are all in one partition (the capture keys its
messages), and the partitions commit in ascending order, so a key that moved partition ends as on
the default route (the higher partition's change wins). A crash between the commits leaves each
partition where its last commit says: each resumes from there, and a commit whose offset the
table recorded already commits nothing (a replay).

**Truncates.** After a truncate the topic's first partition's commit overwrites the table with
its rows from the barrier on, and the others merge theirs: every partition of a truncated topic
commits, even one the table records as done already (then without its transaction identifier,
which stays as it was: Delta skips a write whose version is not newer). So a truncate applied
twice (its event read again after a crash) gives the same table.

**A column added with a default.** Before the commits, a table without a column the topic's
latest schema adds with a default (``pg.missing``) gets it, each of its rows holding the
default: one overwrite of the table in Spark (no row through Python), without offsets.

**A small batch is committed on the driver.** A topic's batch of fewer than
``--driver-merge-below`` messages (native.py decides) is not merged by delta-spark: its decoded
rows and its poison rows come to the driver as Arrow (:meth:`TopicWrite.collect`: one Spark
job, one decode, no shuffle), the last change per key is kept there
(:func:`last_per_key`, by (partition, offset) as the ``max_by`` does) and delta-rs commits them
(delta.RustDeltaWriter, the python route's writer), one commit for the topic carrying every
partition's transaction identifier. delta-spark's MERGE is a dozen Spark jobs whatever its size
(3-4 s a batch on two cores, most of a small batch's time); delta-rs merges a few thousand
changes in a tenth of a second (docs/warehouse.md, "Small batches merged on the driver"). The
driver holds at most that many rows; larger batches, a table's first load among them, stay in
the JVM.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from materializers.core.changes import TopicPartition
from materializers.warehouse import connect
from materializers.warehouse.batch import DELETE, OFFSET, PARTITION
from materializers.warehouse.delta import (
    Commit,
    RustDeltaWriter,
    Source,
    app_id,
    claim,
    open_table,
    stored_offsets,
    table_schema,
)
from materializers.warehouse.spark_avro import TopicSchemas, rows

# A batch of this many rows or more is checked for keys changed more than once (one hash aggregate
# of the keys) before its commits, which skip the dedupe's sorts where none is: below it, the
# check's own Spark job costs more than the dedupe it could spare.
REPEATS_CHECKED = 50_000
# the columns a small batch's rows carry to the driver besides the changes' (TopicWrite.collect),
# named apart from any table column: the poison flag, and a poison row's message bytes
MESSAGE = {"_poison": "_bottler_poison", "key": "_bottler_key", "value": "_bottler_value"}
TXN_APP, TXN_VERSION = ("spark.databricks.delta.write.txnAppId",
                        "spark.databricks.delta.write.txnVersion")


class TopicWrite:
    """The commits of one table topic's rows of a batch into the Delta table at ``path``:
    ``frame`` holds the decoded rows fit for Delta (``partition``, ``offset``, ``v``, ``k``
    the decoded key, and the ``DELETE`` flag of a tombstone); ``columns``: the Delta columns
    of ``v``; ``missing``: the defaults struct (spark_avro.missing_struct) or None. A small
    batch's commit is made on the driver instead (:meth:`collect`, :meth:`on_driver`)."""

    def __init__(self, spark: Any, path: Path, schemas: TopicSchemas, columns: list[Any],
                 missing: tuple[Any, dict] | None):
        self.spark, self.path, self.schemas = spark, path, schemas
        self.columns, self.missing = columns, missing
        self.keys = schemas.key_columns()
        self.changes = self.commits = 0

    def write(self, frame: Any, targets: dict[TopicPartition, int], truncated: bool,
              messages: int = 0) -> None:
        """One commit per partition of ``targets`` (partition -> the offset its commit
        records), in ascending order; ``truncated``: the first overwrites the table;
        ``messages``: the rows of ``frame``, about (a batch of ``REPEATS_CHECKED`` or more
        is checked for keys changed more than once first, :meth:`_repeated`)."""
        from pyspark.sql import functions as F  # noqa: N812

        if not truncated:
            self._add_defaults()
        repeated = ({tp[1] for tp in targets} if self.keys is None or messages < REPEATS_CHECKED
                    else self._repeated(frame))
        first = True
        for tp in sorted(targets):
            part = frame.where(F.col("partition") == tp[1])
            overwrite = truncated and first
            first = False
            if self.keys is None:
                self._commit(tp, targets[tp], truncated, self._save(self._appended(part),
                                                                    overwrite))
                continue
            source = self._source(part, tp[1] in repeated)
            if overwrite or open_table(self.path) is None:  # the table's (first) rows
                claim(self.path)
                upserts = source.where(f"NOT {DELETE}").drop(DELETE)
                self._commit(tp, targets[tp], truncated, self._save(upserts, overwrite))
            else:
                self._commit(tp, targets[tp], truncated, lambda _txn, s=source: self._merge(s))

    def collect(self, frame: Any) -> tuple[pa.Table, pa.Table]:
        """The batch's rows on the driver, as Arrow, in one Spark job (one read and decode of
        the batch): its changes (the Delta columns, the key's, the ``DELETE`` flag, their
        ``PARTITION`` and ``OFFSET``; unkeyed, the upserts alone) and its poison rows'
        messages (``partition``, ``offset``, ``key``, ``value``). A poison row's decoded
        values are nulled before any column is made of them, so none is converted. Measured
        faster than a cache read by two jobs, and than a union (docs/warehouse.md)."""
        from pyspark.sql import functions as F  # noqa: N812

        fit = ~F.col("_poison")
        place = [F.col("partition").alias(PARTITION), F.col("offset").alias(OFFSET)]
        frame = frame.select(*place, F.when(fit, F.col("v")).alias("v"),
                             F.when(fit, F.col("k")).alias("k"), DELETE,
                             *(F.col(c).alias(n) for c, n in MESSAGE.items()))
        both = (frame.select(*self.columns, PARTITION, OFFSET, DELETE, *MESSAGE.values())
                if self.keys is None
                else self._source(frame, repeated=False, keep=[PARTITION, OFFSET,
                                                               *MESSAGE.values()]))
        both = both.toArrow()
        poisoned = pc.field(MESSAGE["_poison"])
        poison = (both.filter(poisoned).select([PARTITION, OFFSET, MESSAGE["key"],
                                                MESSAGE["value"]])
                  .rename_columns(["partition", "offset", "key", "value"]))
        changes = both.filter(~poisoned if self.keys is not None
                              else ~poisoned & ~pc.field(DELETE))
        dropped = [*MESSAGE.values()] + ([DELETE] if self.keys is None else [])
        return changes.drop_columns(dropped), poison

    def on_driver(self, changes: pa.Table, targets: dict[TopicPartition, int],
                  truncated: bool) -> bool:
        """The batch's commit by delta-rs, of :meth:`collect`'s ``changes``: the last change
        per key by (partition, offset), unkeyed every upsert with its place; the offsets in
        the same commit. ``targets`` holds the partitions the table does not record as done
        (native.py leaves the others out), or after a truncate every one: those the table
        records already keep their identifier, as in :meth:`_commit`. False, with nothing
        written, when there is no table and no row to make it with (deletes alone): the
        offsets are then the caller's to keep."""
        offsets = targets
        if not truncated:
            self._add_defaults()
        elif (table := open_table(self.path)) is not None:
            stored = stored_offsets(table, targets)
            offsets = {tp: o for tp, o in targets.items() if stored.get(tp, -1) < o}
        rows = changes if self.keys is None else last_per_key(changes, self.keys)
        commit = Commit(self.path, self.keys, truncated,
                        Source.of(rows) if rows.num_rows else None, offsets)
        if not RustDeltaWriter().commit(commit):
            return False
        self.changes += rows.num_rows
        self.commits += 1
        return True

    def _appended(self, frame: Any) -> Any:
        """An unkeyed table's rows: every upsert, with its place in the topic."""
        from pyspark.sql import functions as F  # noqa: N812

        return frame.where(f"NOT {DELETE}").select(
            *self.columns, F.col("partition").alias(PARTITION), F.col("offset").alias(OFFSET))

    def _save(self, frame: Any, overwrite: bool) -> Callable[[dict], None]:
        """``write(txn)`` of ``frame``'s rows into the table, appended or overwriting it.
        Without the table's optimized write: its rows come in as few Spark partitions as the
        session has cores (the dedupe's shuffle, or the Kafka source's split), a file each,
        and the optimized write's shuffle would put them all into one task, one core."""
        mode = "overwrite" if overwrite else "append"
        return lambda txn: (frame.write.format("delta").mode(mode).options(**txn)
                            .option("optimizeWrite", "false")
                            .option("mergeSchema", "true").save(str(self.path)))

    @staticmethod
    def _repeated(frame: Any) -> set[int]:
        """The partitions of the batch where a key has more than one change (a hash aggregate
        of the keys alone): only those need the per-key dedupe. A snapshot, or a table's
        changes at a few a second, has each key once per batch."""
        found = (frame.groupBy("partition", "k").count().where("count > 1")
                 .select("partition").distinct().collect())
        return {row["partition"] for row in found}

    def _source(self, frame: Any, repeated: bool, keep: list[str] | None = None) -> Any:
        """A partition's changes, one per key: the Delta columns, the key's columns (a
        delete's come from its key), the DELETE flag, and ``keep``'s columns of ``frame``.
        ``repeated``: a key has several changes, and the last by offset is kept (``max_by``,
        whose struct buffer makes it a sort aggregate: two sorts of the rows, the dedupe's
        cost)."""
        from pyspark.sql import functions as F  # noqa: N812

        keep = keep or []
        key_columns, _ = rows(self.schemas.latest_key, "k", "_key_")
        if repeated:
            frame = frame.groupBy("k").agg(F.max_by(F.struct("v", DELETE), F.struct(
                "partition", "offset")).alias("last")).select("k", "last.*")
        source = frame.select(*self.columns, *key_columns, DELETE, *keep)
        for k in self.keys:
            source = source.withColumn(k, F.coalesce(F.col(k), F.col(f"_key_{k}")))
        return source.drop(*[f"_key_{k}" for k in self.keys])

    def _merge(self, source: Any) -> None:
        """The MERGE; the table's columns the source lacks (dropped or renamed at the source)
        are null in it, so an updated row keeps no stale value there, as on the default
        route (an update sets only the columns it names). Over Spark Connect, Delta's SQL
        ``MERGE INTO`` of a temporary view, the same clauses: ``DeltaTable`` is Delta Connect's
        client there, whose server plugin Maven Central does not serve (docs/warehouse.md)."""
        from pyspark.sql import functions as F  # noqa: N812

        have = set(source.columns)
        for f in self.spark.read.format("delta").load(str(self.path)).schema.fields:
            if f.name not in have:
                source = source.withColumn(f.name, F.lit(None).cast(f.dataType))
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in self.keys)
        # the columns named, not UpdateAll/InsertAll: with schema evolution those would add
        # the DELETE flag to the table
        columns = {f"`{c}`": f"s.`{c}`" for c in source.columns if c != DELETE}
        if connect.remote(self.spark):
            view = f"bottler_merge_{uuid.uuid4().hex}"
            source.createOrReplaceTempView(view)
            try:
                self.spark.sql(
                    f"MERGE INTO delta.`{self.path}` t USING {view} s ON {on} "
                    f"WHEN MATCHED AND s.{DELETE} THEN DELETE "
                    f"WHEN MATCHED AND NOT s.{DELETE} THEN UPDATE SET "
                    + ", ".join(f"t.{c} = {v}" for c, v in columns.items())
                    + f" WHEN NOT MATCHED AND NOT s.{DELETE} THEN INSERT ({', '.join(columns)})"
                    f" VALUES ({', '.join(columns.values())})")
            finally:
                self.spark.catalog.dropTempView(view)
            return
        from delta.tables import DeltaTable

        (DeltaTable.forPath(self.spark, str(self.path)).alias("t").merge(source.alias("s"), on)
         .whenMatchedDelete(f"s.{DELETE}")
         .whenMatchedUpdate(f"NOT s.{DELETE}", columns)
         .whenNotMatchedInsert(f"NOT s.{DELETE}", columns).execute())

    def _commit(self, tp: TopicPartition, offset: int, forced: bool,
                write: Callable[[dict], None]) -> None:
        """``write(txn)`` as one Delta commit recording ``offset`` as ``tp``'s transaction
        identifier: a DataFrame write takes ``txn`` as its options, a MERGE the same from the
        session's configuration. A commit the table records already (a replay) is skipped,
        unless ``forced`` (after a truncate): then it is made without the identifier."""
        table = open_table(self.path)
        stored = stored_offsets(table, [tp]).get(tp, -1) if table is not None else -1
        if stored >= offset and not forced:
            return  # committed already (a replay)
        txn = {} if stored >= offset else {"txnAppId": app_id(tp), "txnVersion": str(offset)}
        conf = self.spark.conf
        conf.set("spark.databricks.delta.schema.autoMerge.enabled", "true")
        if txn:
            conf.set(TXN_APP, txn["txnAppId"])
            conf.set(TXN_VERSION, txn["txnVersion"])
        try:
            write(txn)
        finally:
            conf.unset(TXN_APP)
            conf.unset(TXN_VERSION)
        self.changes += _rows(open_table(self.path))
        self.commits += 1

    def _add_defaults(self) -> None:
        """The columns the latest schema adds with a default that the table lacks, added with
        the default on every row already there (one commit, no offsets: those stay)."""
        table = open_table(self.path)
        if self.missing is None or table is None:
            return
        have = set(table_schema(table).names)
        struct, schema = self.missing
        defaults, _ = rows(schema, "d")
        one = self.spark.range(1).select(struct.alias("d")).select(*defaults)
        new = [c for c in one.columns if c not in have]
        if not new:
            return
        (self.spark.read.format("delta").load(str(self.path)).crossJoin(one.select(*new))
         .write.format("delta").mode("overwrite").option("mergeSchema", "true")
         .option("userMetadata", "bottler: added " + ", ".join(new) + " with their defaults")
         .save(str(self.path)))


def last_per_key(changes: pa.Table, keys: list[str]) -> pa.Table:
    """Each key's last change of ``changes`` by (``PARTITION``, ``OFFSET``), without
    those two columns: the driver's side of the dedupe ``TopicWrite._source`` does in Spark
    (a key's changes are in one partition; one that moved keeps the higher partition's)."""
    ordered = changes.sort_by([(PARTITION, "ascending"), (OFFSET, "ascending")])
    ordered = ordered.append_column("_row", pa.array(range(ordered.num_rows), pa.int64()))
    last = ordered.group_by(keys, use_threads=False).aggregate([("_row", "max")])
    return ordered.take(last.column("_row_max")).drop_columns(["_row", PARTITION, OFFSET])


def _rows(table: Any) -> int:
    """The source rows of the table's last commit (its operation metrics; an auto compaction
    may have committed after it): the changes it applied after the per-key dedupe."""
    for entry in table.history(2) if table is not None else ():
        if entry.get("operation") != "OPTIMIZE":
            metrics = entry.get("operationMetrics") or {}
            return int(metrics.get("numSourceRows") or metrics.get("numOutputRows") or 0)
    return 0
