"""The warehouse on multi-partition table topics: every topic partition's offset range is cut
into Spark partitions of ``chunk`` offsets, read in parallel, and a key's last event wins (its
events are all in one partition, in order): the Delta table equals the source."""

from __future__ import annotations

import json
import time

import psycopg

from materializers.warehouse.delta import open_table
from materializers.warehouse.job import WarehouseJob
from materializers.warehouse.source import NAME
from tests.support.databases import execute
from tests.support.waiting import wait_streaming

TABLE = """
create table wide (id int primary key, v text);
insert into wide select g, 'v' || g from generate_series(1, 200) g;
"""


def test_a_four_partition_topic_is_read_as_one_spark_partition_per_range_and_merged_right(
        spark, stack, source, prefix, start, tmp_path):
    execute(source, TABLE)
    start(partitions=4)
    wait_streaming(source, prefix)
    execute(source, "update wide set v = 'again ' || id where id % 3 = 0")
    execute(source, "delete from wide where id % 10 = 0")
    execute(source, "update wide set v = 'last ' || id where id % 3 = 0")
    topic = f"{prefix}.wide"
    job = WarehouseJob(spark, str(tmp_path / "wh"), bootstrap=stack.kafka,
                       registry=stack.registry_url, prefix=prefix, chunk=16)
    try:
        result = job.batch()
        expected = 200 + 66 + 20 + 60  # the snapshot, updates, deletes, updates
        deadline = time.monotonic() + 60
        while sum(o for (t, _), o in result.offsets.items() if t == topic) < expected:
            assert time.monotonic() < deadline, f"not every change read: {result.offsets}"
            result = job.batch()  # the capture may still be publishing the last changes
    finally:
        job.close()
    # the topic's 4 partitions, each read up to its end
    ends = {p: o for (t, p), o in result.offsets.items() if t == topic}
    assert sorted(ends) == [0, 1, 2, 3] and all(ends.values()) and sum(ends.values()) == expected
    with psycopg.connect(source) as conn:
        want = sorted(conn.execute("select id, v from wide").fetchall(), key=repr)
    table = open_table(tmp_path / "wh" / prefix / "public" / "wide").to_pyarrow_table(
        columns=["id", "v"])
    assert sorted(((r["id"], r["v"]) for r in table.to_pylist()), key=repr) == want

    # each range of a topic partition is a Spark partition of its own
    ranges = [[topic, p, lo, min(lo + 16, end)] for p, end in ends.items()
              for lo in range(0, end, 16)]
    frame = (spark.read.format(NAME).option("bootstrap", stack.kafka)
             .option("registry", stack.registry_url).option("ranges", json.dumps(ranges)).load())
    assert frame.rdd.getNumPartitions() == len(ranges) > 4
    # each range keeps the last event of each of its keys, so its last offset always
    read = {(r.partition, r.offset) for r in frame.select("partition", "offset").collect()}
    assert len(read) <= expected
    assert all((p, hi - 1) in read for _, p, _, hi in ranges)
