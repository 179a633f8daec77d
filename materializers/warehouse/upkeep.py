"""Housekeeping of the spark route's Delta tables (native.py), for a warehouse that runs for
weeks (issue 27, item 5). Delta does most of it itself once asked; bottler asks:

- **Compaction as the tables are written.** The tables bottler writes carry Delta's
  ``delta.autoOptimize.optimizeWrite`` (a commit's rows in as few files as its size needs) and
  ``delta.autoOptimize.autoCompact`` (after a commit leaves ``AUTO_COMPACT_FILES`` small files, a
  compaction commit rewrites them into one): new tables from the session's defaults
  (``spark.databricks.delta.properties.defaults.*``), others (made by delta-rs: the python
  route, a small first batch merged on the driver) set once when missing, by delta-rs. A user's
  own value stays. delta-spark compacts after its own writes only, so after a batch the driver
  merged (spark_merge.py), delta-rs compacts the table once it has ``AUTO_COMPACT_FILES`` files
  under ``SMALL_FILE`` (:func:`compact`), as delta-spark's would.
- **Retention.** ``delta.deletedFileRetentionDuration`` and ``delta.logRetentionDuration`` are
  ``--retention-hours``: the files older versions used and the log entries are kept that long
  (time travel and readers' running queries), then VACUUM and Delta's log cleanup remove them.
  Any engine's VACUUM honours the same table properties.
- **VACUUM**, from the job between two batches (no commit of its own runs at the same time),
  every ``retention / 4`` (at most hourly): the table's retention, its own property; by
  delta-rs, as ``bottler warehouse vacuum`` (:func:`vacuum`).
- **Checkpoints**: Delta's own, every ``delta.checkpointInterval`` (10, set on the tables so
  that delta-rs's commits take it too, its own default being 100) commits, which is also when
  delta-spark drops the log entries past their retention (after delta-rs's commits, a VACUUM
  does); after a VACUUM, whose commits may take the versions delta-spark would have
  checkpointed, one by delta-rs if the log is 10 entries past the last.
- **Checksums**: none written (``writeChecksumFile.enabled`` off: a ``.crc`` is 3.5-17 KB per
  commit, a third to most of a small table's log, and no reader needs it; the MERGE's Spark
  jobs stay as many, but for three after each checkpoint). Those an earlier run or another
  writer left beside each commit are deleted with it by delta-spark's log cleanup but not by
  delta-rs's: after a VACUUM, those whose commit is gone.
- **The scratch checkpoint** of the streaming query (its offsets and commits logs; Delta is the
  truth, native.py) is a directory of the run, named with the job's pid and removed when the run
  ends; a run killed with ``kill -9`` leaves it, and the next run removes those of processes that
  are gone (:func:`clean_scratch`).

A table that got no change in a batch gets no commit (native.py): an idle warehouse writes
nothing.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from materializers.core.changes import TopicPartition
from materializers.warehouse import maintenance
from materializers.warehouse.delta import open_table
from materializers.warehouse.native import CHECKPOINT_PREFIX, SparkRoute
from materializers.warehouse.sink import table_path
from materializers.warehouse.spark_avro import topic_schemas

log = logging.getLogger(__name__)

CHECKPOINT_EVERY = 10  # delta-spark's delta.checkpointInterval default
AUTO_COMPACT_FILES = 20  # small files that make Delta's auto compaction run (Delta's own: 50)
# A file auto compaction rewrites is smaller than this (Delta's own: 64 MB, half its target):
# a large batch's files, tens of MB each, are left as they are
SMALL_FILE = 8 * 1024 * 1024
# the table properties set when missing (a user's own value stays)
KEPT = {"delta.autoOptimize.optimizeWrite": "true", "delta.autoOptimize.autoCompact": "true",
        "delta.checkpointInterval": str(CHECKPOINT_EVERY)}
_SCRATCH_PID = re.compile(re.escape(CHECKPOINT_PREFIX) + r"(\d+)-")


def retention(hours: float) -> dict[str, str]:
    """The table properties of a ``hours`` retention (Delta's intervals take whole units)."""
    interval = f"interval {max(1, round(hours * 3600))} seconds"
    return {"delta.deletedFileRetentionDuration": interval,
            "delta.logRetentionDuration": interval}


def session_conf(hours: float) -> dict[str, str]:
    """The session settings the housekeeping needs: the new tables' properties, auto
    compaction's threshold, no checksum files."""
    defaults = {f"spark.databricks.delta.properties.defaults.{k.removeprefix('delta.')}": v
                for k, v in (KEPT | retention(hours)).items()}
    return defaults | {"spark.databricks.delta.autoCompact.minNumFiles": str(AUTO_COMPACT_FILES),
                       "spark.databricks.delta.autoCompact.minFileSize": str(SMALL_FILE),
                       "spark.databricks.delta.writeChecksumFile.enabled": "false"}


class Upkeep:
    """The housekeeping of the tables one job writes; :meth:`after_batch` runs it when due."""

    def __init__(self, spark: Any, hours: float):
        self.spark, self.hours = spark, hours
        self.every = min(3600.0, hours * 3600 / 4)  # seconds between two VACUUMs
        self._vacuumed: dict[Path, float] = {}  # table → when its VACUUM last ran
        for name, value in session_conf(hours).items():
            if spark.conf.get(name, None) is None:  # spark-submit's --conf wins
                spark.conf.set(name, value)

    def after_batch(self, tables: Iterable[Path]) -> None:
        """The tables a batch committed to: their properties as the module docstring says,
        a compaction of their small files when due, and a VACUUM of each one whose last is
        ``every`` seconds old (the first after ``every`` seconds of this run)."""
        now = time.monotonic()
        for path in tables:
            if path not in self._vacuumed:
                self._properties(path)
                self._vacuumed[path] = now
            elif now - self._vacuumed[path] >= self.every:
                vacuum(path)
                self._vacuumed[path] = time.monotonic()
            compact(path)

    def _properties(self, path: Path) -> None:
        """The properties the module docstring names, set by delta-rs where missing (one
        commit, no Spark job)."""
        table = open_table(path)
        if table is None:
            return
        have = table.metadata().configuration
        wanted = {k: v for k, v in KEPT.items() if k not in have}
        wanted |= {k: v for k, v in retention(self.hours).items() if have.get(k) != v}
        if wanted:
            table.alter.set_table_properties(wanted)
            log.info("warehouse: %s set on %s", ", ".join(sorted(wanted)), path)


def compact(path: Path) -> None:
    """The table's files under ``SMALL_FILE`` rewritten into files of up to that size by
    delta-rs once there are ``AUTO_COMPACT_FILES`` of them, as delta-spark's auto compaction
    does after its own writes (its minNumFiles, minFileSize): the driver's commits are not
    followed by it."""
    table = open_table(path)
    if table is None:
        return
    sizes = pa.table(table.get_add_actions(flatten=True)).column("size_bytes")
    if (pc.sum(pc.less(sizes, SMALL_FILE)).as_py() or 0) < AUTO_COMPACT_FILES:
        return
    metrics = table.optimize.compact(target_size=SMALL_FILE)
    log.info("warehouse: compacted %s: %s files into %s", path,
             metrics.get("numFilesRemoved"), metrics.get("numFilesAdded"))


def vacuum(path: Path) -> list[str]:
    """VACUUM with the table's own retention (its ``delta.deletedFileRetentionDuration``), by
    delta-rs, as ``bottler warehouse vacuum``: it reads the log and lists the table's directory
    in the driver, in well under a second where delta-spark's took 34-63 s of Spark jobs per
    demo table (load average 10-15). The files it deleted."""
    started = time.monotonic()
    # full: also the files no tombstone names any more (a checkpoint drops the tombstones past
    # the retention, whether or not a VACUUM came between)
    gone = maintenance.vacuum(path, None, dry_run=False, full=True)
    log.info("warehouse: VACUUM of %s: %d files deleted in %.1f s", path, len(gone),
             time.monotonic() - started)
    _checkpointed(path)
    if (table := open_table(path)) is not None:
        # the log entries past delta.logRetentionDuration: delta-spark drops them at its own
        # checkpoints, not at those of delta-rs's commits (the driver's)
        table.cleanup_metadata()
    _drop_orphan_checksums(path)
    return gone


def _checkpointed(path: Path) -> None:
    """A checkpoint where the log has ``CHECKPOINT_EVERY`` entries past the last one: delta-spark
    writes one after a commit whose version is a multiple of 10, and a VACUUM's own commits
    (delta-rs writes a start and an end) may take those versions."""
    table = open_table(path)
    if table is None:
        return
    marker = path / "_delta_log" / "_last_checkpoint"
    last = json.loads(marker.read_text())["version"] if marker.exists() else -1
    if table.version() - last >= CHECKPOINT_EVERY:
        table.create_checkpoint()


_CHECKSUM = re.compile(r"^\d{20}\.crc$")


def _drop_orphan_checksums(path: Path) -> None:
    """Delete the checksums (``N.crc``, 4-17 KB, which delta-spark writes beside each commit)
    whose commit the log cleanup removed. delta-spark's cleanup at its checkpoints deletes
    both, delta-rs's (after a VACUUM took a checkpoint's version) only the commit: measured,
    61 checksums left beside 9 commits after an hour, the log growing ~5 KB per batch. A
    checksum is written after its commit, so one without its commit is never a commit under
    way."""
    log_dir = path / "_delta_log"
    orphans = [f for f in log_dir.glob("*.crc")
               if _CHECKSUM.match(f.name) and not f.with_suffix(".json").exists()]
    for orphan in orphans:
        orphan.unlink(missing_ok=True)


def clean_scratch() -> None:
    """Remove the scratch checkpoints (native.py) of runs whose process is gone."""
    for old in Path(tempfile.gettempdir()).glob(CHECKPOINT_PREFIX + "*"):
        found = _SCRATCH_PID.match(old.name)
        if found and not _alive(int(found[1])):
            shutil.rmtree(old, ignore_errors=True)
            log.info("warehouse: removed %s, the scratch of a run that is gone", old)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class KeptRoute(SparkRoute):
    """The spark route with its housekeeping: :class:`Upkeep` after each batch, on the tables
    the batch committed to."""

    def __init__(self, spark: Any, root: Path, *, retention_hours: float, **kwargs: Any):
        super().__init__(spark, root, **kwargs)
        clean_scratch()
        self.upkeep = Upkeep(spark, retention_hours)
        self._tables: dict[str, Path] = {}  # topic → its table's path

    def batch(self, frame: Any, ends: dict[TopicPartition, int],
              begins: dict[TopicPartition, int]) -> Any:
        result = super().batch(frame, ends, begins)
        try:
            topics = sorted({t for t, _ in result.offsets} - {self.truncate_topic})
            self.upkeep.after_batch([p for t in topics if (p := self._table(t)) is not None])
        except Exception as exc:  # noqa: BLE001 - the batch is committed: housekeeping waits
            log.warning("warehouse: housekeeping failed, tried again after a later batch: %s",
                        exc)
        return result

    def _table(self, topic: str) -> Path | None:
        """The path of ``topic``'s table (a topic's table keeps its name); None while the topic
        has no value schema (nothing but tombstones in it)."""
        if topic not in self._tables:
            schemas = topic_schemas(self.client, topic)
            if schemas is None:
                return None
            self._tables[topic] = table_path(self.root, schemas.table)
        return self._tables[topic]
