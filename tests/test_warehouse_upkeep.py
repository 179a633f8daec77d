"""The spark route's housekeeping without Spark (upkeep.py): VACUUM with the table's own
retention, the compaction that follows the driver's commits, the table properties of a
retention, and the removal of dead runs' scratch checkpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pyarrow as pa
from deltalake import CommitProperties, Transaction, write_deltalake

from materializers.warehouse import upkeep
from materializers.warehouse.delta import open_table
from materializers.warehouse.native import CHECKPOINT_PREFIX


def test_vacuum_deletes_what_the_tables_own_retention_no_longer_needs(tmp_path):
    path = tmp_path / "public" / "items"
    for n in range(3):  # three versions, each rewriting the table
        write_deltalake(path, pa.table({"id": [n]}), mode="overwrite",
                        configuration=upkeep.retention(1 / 3600))  # one second
    assert len(list(path.glob("*.parquet"))) == 3
    # a file no tombstone names (a checkpoint dropped the expired tombstones)
    (path / "part-00000-orphan.snappy.parquet").write_bytes(b"")
    time.sleep(1.5)
    gone = upkeep.vacuum(path)
    assert len(gone) == 3
    assert [p.name for p in path.glob("*.parquet")] == [
        os.path.basename(u) for u in open_table(path).file_uris()]
    assert open_table(path).to_pyarrow_table().to_pylist() == [{"id": 2}]


def test_a_vacuum_leaves_the_log_checkpointed_within_ten_entries(tmp_path):
    path = tmp_path / "public" / "items"
    for n in range(12):  # delta-rs checkpoints every 100 commits: none yet
        write_deltalake(path, pa.table({"id": [n]}), mode="append")
    assert not (path / "_delta_log" / "_last_checkpoint").exists()
    upkeep.vacuum(path)
    last = json.loads((path / "_delta_log" / "_last_checkpoint").read_text())["version"]
    assert open_table(path).version() - last < upkeep.CHECKPOINT_EVERY


def test_a_vacuum_deletes_the_checksums_whose_commit_the_log_cleanup_removed(tmp_path):
    path = tmp_path / "public" / "items"
    for n in range(4):
        write_deltalake(path, pa.table({"id": [n]}), mode="append")
    open_table(path).create_checkpoint()
    log_dir = path / "_delta_log"
    checksums = [log_dir / f"{v:020d}.crc" for v in range(4)]  # delta-spark's, one per commit
    temporary = log_dir / f".{3:020d}.crc.3f2a.tmp"  # one being written
    for f in (*checksums, temporary):
        f.write_text("{}")
    for v in range(2):  # expired: the log cleanup deleted the commits, not their checksums
        (log_dir / f"{v:020d}.json").unlink()
    upkeep.vacuum(path)
    assert [f.exists() for f in checksums] == [False, False, True, True]
    assert temporary.exists()
    assert open_table(path).version() == 3


def test_small_files_are_compacted_once_there_are_enough_keeping_rows_and_offsets(tmp_path):
    path = tmp_path / "public" / "items"
    for n in range(upkeep.AUTO_COMPACT_FILES):  # what the driver's commits leave, a file each
        txn = CommitProperties(app_transactions=[Transaction("bottler:p.items:0", n + 1)])
        write_deltalake(path, pa.table({"id": [n]}), mode="append", commit_properties=txn)
        if n == upkeep.AUTO_COMPACT_FILES - 2:
            upkeep.compact(path)  # one file short: nothing yet
            assert len(open_table(path).file_uris()) == n + 1
    upkeep.compact(path)
    table = open_table(path)
    assert len(table.file_uris()) == 1
    assert sorted(table.to_pyarrow_table()["id"].to_pylist()) == list(
        range(upkeep.AUTO_COMPACT_FILES))
    assert table.transaction_version("bottler:p.items:0") == upkeep.AUTO_COMPACT_FILES


def test_a_retention_is_both_delta_retentions_in_whole_seconds():
    assert upkeep.retention(24) == {"delta.deletedFileRetentionDuration": "interval 86400 seconds",
                                    "delta.logRetentionDuration": "interval 86400 seconds"}
    conf = upkeep.session_conf(0.1)
    assert conf["spark.databricks.delta.properties.defaults.deletedFileRetentionDuration"] == (
        "interval 360 seconds")
    assert conf["spark.databricks.delta.properties.defaults.autoOptimize.autoCompact"] == "true"
    assert conf["spark.databricks.delta.properties.defaults.checkpointInterval"] == "10"
    assert conf["spark.databricks.delta.writeChecksumFile.enabled"] == "false"  # no .crc


def test_the_scratch_checkpoints_of_dead_runs_are_removed(tmp_path, monkeypatch):
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"{CHECKPOINT_PREFIX}{gone.pid}-abc"
    live = tmp_path / f"{CHECKPOINT_PREFIX}{os.getpid()}-abc"
    for d in (dead, live):
        (d / "offsets").mkdir(parents=True)
    upkeep.clean_scratch()
    assert not dead.exists()
    assert live.exists()
