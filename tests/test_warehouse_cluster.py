"""The warehouse's spark route on a Spark cluster, as a Spark user runs their jobs: a standalone
master and one worker (tests/support/spark_cluster.py), and ``spark-submit --master spark://…
--jars … materializers/warehouse/submit.py --config … --once`` with the same YAML file as
``bottler materialize warehouse``. The Delta tables are read back with delta-rs and compared with
the source; the executor ran on the worker; the tables carry the housekeeping's properties
(upkeep.py). Also: run outside spark-submit, the file says how to run it; the docs'
``--packages`` are the pins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from materializers.warehouse import jars, submit
from materializers.warehouse.delta import open_table
from tests.support.databases import execute
from tests.support.spark_cluster import ROOT, standalone
from tests.support.waiting import wait_streaming

SHOP = """
create table items (id int primary key, name text, price numeric(10,2));
insert into items select g, 'item ' || g, g / 4.0 from generate_series(1, 200) g;
update items set name = 'renamed' where id <= 20;
delete from items where id > 190;
"""


@pytest.mark.timeout(600)  # three JVMs start (master, worker, driver), then an executor's
def test_spark_submit_loads_the_topics_on_a_standalone_cluster(stack, source, prefix, start,
                                                               tmp_path):
    import psycopg

    execute(source, SHOP)
    start()
    wait_streaming(source, prefix)
    config = tmp_path / "bottler.yaml"
    config.write_text(yaml.safe_dump({
        "path": str(tmp_path / "warehouse"), "broker": stack.kafka,
        "schema_registry": stack.registry_url, "topic_prefix": prefix,
        "master": "local[1]",  # the file's own; spark-submit's --master is the one used
    }))
    with standalone(tmp_path / "spark") as cluster:
        run = cluster.submit(Path(submit.__file__), "--config", str(config), "--once",
                             jars=jars.spark_jars())
        assert run.returncode == 0, run.stderr[-3000:]
        assert "Asked to launch executor" in cluster.worker_log()  # the worker did the work
    # spark-submit passes the Python driver's stderr on to its stdout
    assert f"warehouse: Spark session on {cluster.master}" in run.stdout, run.stdout[-3000:]
    assert "warehouse load done: " in run.stdout
    table = open_table(tmp_path / "warehouse" / prefix / "public" / "items")
    rows = sorted(tuple(r.values()) for r in
                  table.to_pyarrow_table(columns=["id", "name"]).to_pylist())
    with psycopg.connect(source) as conn:
        assert rows == sorted(conn.execute("select id, name from items").fetchall())
    properties = table.metadata().configuration
    assert properties["delta.autoOptimize.autoCompact"] == "true"
    assert properties["delta.deletedFileRetentionDuration"] == "interval 86400 seconds"
    log_dir = tmp_path / "warehouse" / prefix / "public" / "items" / "_delta_log"
    assert not list(log_dir.glob("0*.crc"))  # delta-spark wrote no checksum file (upkeep.py)


def test_outside_spark_submit_the_file_says_how_to_run_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    run = subprocess.run([sys.executable, submit.__file__, "--path", str(tmp_path)],
                         env=env | {"PYTHONPATH": str(ROOT)}, capture_output=True, text=True)
    assert run.returncode == 2
    assert "run it through spark-submit" in run.stderr
    assert "Traceback" not in run.stderr


def test_the_docs_give_the_pinned_packages():
    assert f"--packages {jars.packages()}" in (ROOT / "docs" / "warehouse.md").read_text()
