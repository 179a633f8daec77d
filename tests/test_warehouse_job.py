"""The warehouse load end to end: a real capture of a fresh source database, the PySpark job
(one shared local SparkSession), Delta tables read back with delta-rs and compared with the
source after a mixed write load, a crash between the Delta commits of a batch, and a rerun."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psycopg
import pytest

from materializers.warehouse.delta import RustDeltaWriter, open_table
from materializers.warehouse.job import WarehouseJob
from tests.support.databases import execute
from tests.support.waiting import wait_streaming

SHOP = """
create table items (id int primary key, name text, price numeric(10,2), at timestamptz,
                    day date, tags text[]);
insert into items select g, 'item ' || g, g / 4.0,
                         '2024-06-01 12:00+02'::timestamptz + g * '1h'::interval,
                         '2024-01-01'::date + g, array['t' || g, null]
  from generate_series(1, 300) g;
create table log (at int, what text);
insert into log select g, 'line ' || g from generate_series(1, 40) g;
create table gone (id bigint primary key, v text);
insert into gone select g, 'v' || g from generate_series(1, 20) g;
"""
LOAD = [
    *[f"update items set name = 'n{i}', price = {i} where id = {i % 7 + 1}" for i in range(60)],
    "delete from items where id between 100 and 150",
    "insert into log values (41, 'more'), (41, 'more')",
    "alter table items add column note text",
    "update items set note = 'noted' where id <= 10",
    "insert into items values (1000, 'new', 1, '-infinity', 'infinity', '{}', 'with note')",
    "truncate gone",
    "insert into gone values (7, 'after')",
    "delete from items where id = 2",
    "insert into items (id, name) values (2, 'again')",
]
# ±infinity as Delta holds them: the ends of Delta's range
CLAMPED = ("case when at = '-infinity' then '0001-01-01 00:00+00' when at = 'infinity' then "
           "'9999-12-31 23:59:59.999999+00' else at end as at, case when day = '-infinity' then "
           "'0001-01-01' when day = 'infinity' then '9999-12-31' else day end as day")
QUERIES = {"items": f"select id, name, price, {CLAMPED}, tags from items",
           "log": "select at, what from log", "gone": "select id, v from gone"}


def source_rows(dsn: str, table: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        conn.execute("set timezone = 'UTC'")
        return sorted(conn.execute(QUERIES[table]).fetchall(), key=repr)


def delta_rows(root, table: str, columns: list[str]) -> list[tuple]:
    """The rows of ``public.<table>`` under ``root`` (a prefix's: ``<path>/<prefix>``)."""
    delta = open_table(root / "public" / table)
    if delta is None:
        return []
    rows = delta.to_pyarrow_table(columns=columns).to_pylist()
    return sorted((tuple(r[c] for c in columns) for r in rows), key=repr)


COLUMNS = {"items": ["id", "name", "price", "at", "day", "tags"], "log": ["at", "what"],
           "gone": ["id", "v"]}


def columns(table: str) -> list[str]:
    return COLUMNS[table]


def expected(dsn: str, table: str) -> list[tuple]:
    return source_rows(dsn, table)


def job(spark, stack, root, prefix, **options) -> WarehouseJob:
    return WarehouseJob(spark, str(root), bootstrap=stack.kafka, registry=stack.registry_url,
                        prefix=prefix, **options)


def converge(spark, stack, root, prefix, source, timeout=90, **options) -> None:
    """Warehouse loads until the Delta tables equal the source (the capture may still be
    publishing the last changes)."""
    deadline = time.monotonic() + timeout
    while True:
        load = job(spark, stack, root, prefix, **options)
        try:
            load.run_until_caught_up()
        finally:
            load.close()
        diff = {t: (delta_rows(root / prefix, t, columns(t)), expected(source, t)) for t in QUERIES}
        if all(a == b for a, b in diff.values()):
            return
        if time.monotonic() > deadline:
            bad = {t: next((x, y) for x, y in zip(a, b, strict=False) if x != y)
                   if len(a) == len(b) else (len(a), len(b))
                   for t, (a, b) in diff.items() if a != b}
            raise AssertionError(f"Delta tables differ from the source: {bad}")
        time.sleep(1)


class Crashing(RustDeltaWriter):
    """Dies before its ``left``-th commit: mid-batch, some tables committed, others not."""

    def __init__(self, left: int):
        self.left = left

    def commit(self, commit):
        self.left -= 1
        if self.left < 0:
            raise OSError("killed")
        return super().commit(commit)


def test_a_load_with_a_crash_and_a_rerun_equals_the_source(spark, stack, source, prefix, start,
                                                          tmp_path):
    execute(source, SHOP)
    start(allow_unkeyed=True)
    wait_streaming(source, prefix)
    root = tmp_path / "warehouse"
    converge(spark, stack, root, prefix, source)
    execute(source, *LOAD)
    time.sleep(2)  # most of the load published
    versions = {t: open_table(root / prefix / "public" / t).version() for t in QUERIES}
    crashing = job(spark, stack, root, prefix, writer=Crashing(2), max_messages=40)
    with pytest.raises(OSError, match="killed"):
        crashing.run_until_caught_up()
    crashing.close()
    moved = [t for t in QUERIES
             if open_table(root / prefix / "public" / t).version() != versions[t]]
    assert moved, "the crash came before any commit"
    mid_load = delta_rows(root / prefix, "items", columns("items"))
    assert mid_load != expected(source, "items")
    converge(spark, stack, root, prefix, source)  # the rerun: the unkeyed log has no duplicates
    items = open_table(root / prefix / "public" / "items")
    assert "note" in items.schema().to_arrow().names  # the added column
    assert items.transaction_version(f"bottler:{prefix}.items:0") is not None
    rebuilt = tmp_path / "rebuilt"  # from offset zero into a fresh path, by the command line
    done = subprocess.run(
        [sys.executable, "-m", "bottler", "materialize", "warehouse", "--path", str(rebuilt),
         "--topic-prefix", prefix, "--once", "--on-poison", "stop"],
        env={**os.environ, "BOTTLER_KAFKA": stack.kafka, "BOTTLER_REGISTRY": stack.registry_url},
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "warehouse load done" in done.stdout
    for table in QUERIES:
        assert delta_rows(rebuilt / prefix, table, columns(table)) == delta_rows(
            root / prefix, table, columns(table))


def test_an_idle_trigger_runs_no_spark_job_and_costs_next_to_nothing(spark, stack, tmp_path):
    """With nothing new, a batch reads the watermarks and stops there: no Spark job, well
    under 0.2 CPU s in the driver; a batch with news runs Spark, stages and counts itself."""
    from materializers.core import metrics
    from tests.support.loops import Topic

    topic = Topic(stack)
    for i in range(10):
        topic.put(i, f"v{i}")
    topic.producer.flush(30)
    job = WarehouseJob(spark, str(tmp_path / "warehouse"), bootstrap=stack.kafka,
                       registry=stack.registry_url, prefix=topic.prefix)
    batches = metrics.BATCHES.labels("warehouse")
    try:
        before = batches._value.get()
        assert job.run_until_caught_up().changes == 10
        assert batches._value.get() > before
        tracker = spark.sparkContext.statusTracker()
        jobs = set(tracker.getJobIdsForGroup())
        cpu = time.process_time()
        for _ in range(5):
            result = job.batch()
            assert result.messages == 0 and result.changes == 0
        idle_cpu = (time.process_time() - cpu) / 5
        assert set(tracker.getJobIdsForGroup()) == jobs, "an idle trigger ran a Spark job"
        assert idle_cpu < 0.2, f"an idle trigger took {idle_cpu:.3f} CPU s"
    finally:
        job.close()
    assert not list((tmp_path / "warehouse" / topic.prefix / "_bottler_staging").glob("*"))


def test_the_streaming_query_idles_without_spark_jobs_and_resumes_from_delta(spark, stack,
                                                                            tmp_path):
    """The continuous job (a processing-time trigger): once caught up, its triggers find the
    offsets unmoved and run no batch and no Spark job; a new message is loaded; a new query
    on the same warehouse starts where the Delta tables stand (nothing read twice)."""
    import threading

    from tests.support.loops import Topic

    topic = Topic(stack)
    for i in range(10):
        topic.put(i, f"v{i}")
    topic.producer.flush(30)
    root = tmp_path / "warehouse"
    table = root / topic.prefix / "public" / "t"  # a prefix's tables live under it
    offset = f"bottler:{topic.name}:0"

    def version(at_least: int) -> bool:
        delta = open_table(table)
        return delta is not None and (delta.transaction_version(offset) or 0) >= at_least

    job = WarehouseJob(spark, str(root), bootstrap=stack.kafka, registry=stack.registry_url,
                       prefix=topic.prefix)
    stop = threading.Event()
    done: list = []
    runner = threading.Thread(target=lambda: done.append(job.run(stop, interval=0.1)))
    runner.start()
    try:
        wait_until(lambda: version(10), 120, "the first 10 messages in Delta")
        tracker = spark.sparkContext.statusTracker()
        jobs = set(tracker.getJobIdsForGroup())
        commits = open_table(table).version()
        time.sleep(1.5)  # some 15 triggers with nothing new
        assert set(tracker.getJobIdsForGroup()) == jobs, "an idle trigger ran a Spark job"
        assert open_table(table).version() == commits
        topic.put(3, "three again")
        topic.producer.flush(30)
        wait_until(lambda: version(11), 60, "the 11th message in Delta")
    finally:
        stop.set()
        runner.join(60)
        job.close()
    assert done and done[0].messages == 11 and not runner.is_alive()
    again = WarehouseJob(spark, str(root), bootstrap=stack.kafka, registry=stack.registry_url,
                         prefix=topic.prefix)
    try:
        versions = open_table(table).version()
        assert again.run_until_caught_up().messages == 0  # started where Delta stands
        assert open_table(table).version() == versions
    finally:
        again.close()


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_the_kafka_connector_route_decodes_as_the_data_source_does(spark, stack):
    """Where Spark's Kafka connector is (the Docker image), its rows are decoded by the same
    function in a UDF: fed the connector's columns, it gives the ``bottler_kafka`` rows."""
    import datetime
    import json

    from materializers.warehouse.kafka import decoded_frame
    from materializers.warehouse.source import NAME, read_range
    from tests.support.loops import Topic

    topic = Topic(stack)
    for i in range(5):
        topic.put(i, f"v{i}" if i != 3 else None)
    topic.producer.flush(30)
    raw = [(m.topic(), m.partition(), m.offset(),
            datetime.datetime.fromtimestamp(m.timestamp()[1] / 1000, datetime.UTC),
            m.key(), m.value())
           for m in read_range(stack.kafka, topic.name, 0, 0, 5)]
    connector = spark.createDataFrame(
        raw, "topic string, partition int, offset long, timestamp timestamp, key binary, "
             "value binary")
    ours = (spark.read.format(NAME).option("bootstrap", stack.kafka)
            .option("registry", stack.registry_url)
            .option("ranges", json.dumps([[topic.name, 0, 0, 5]])).load())
    got = sorted(tuple(r) for r in decoded_frame(connector, stack.registry_url).collect())
    assert got == sorted(tuple(r) for r in ours.collect())
    assert [r[4] for r in got] == ["upsert", "upsert", "upsert", "delete", "upsert"]
