"""The warehouse's spark route (``--route spark``, materializers/warehouse/native.py): Spark's
Kafka source, from_avro and delta-spark's MERGE, on a real capture; the Delta tables read back
with delta-rs (the independent reader) and compared with the source; a rerun with nothing new
commits nothing; and the jar pins checked in one line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import SchemaRegistryClient

from common.errors import BottlerError
from materializers.warehouse import cds, jars, spark_merge
from materializers.warehouse.delta import open_table
from materializers.warehouse.kafka import java_properties
from materializers.warehouse.native import SparkRoute
from schemas.topics import DEAD_LETTER, with_prefix
from tests.support.databases import execute
from tests.support.spark_shop import LOAD, QUERIES, SHOP, delta_rows, source_rows
from tests.support.topics import read_topic
from tests.support.waiting import in_thread, wait_for, wait_streaming


def load(spark, stack, root: Path, prefix: str, driver_merge_below: int = 0) -> None:
    route = SparkRoute(spark, root, bootstrap=stack.kafka, registry=stack.registry_url,
                       prefix=prefix, driver_merge_below=driver_merge_below)
    try:
        route.run_until_caught_up()
    finally:
        route.close()


def converge(spark, stack, root: Path, prefix: str, source: str, timeout=120,
             driver_merge_below: int = 0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        load(spark, stack, root, prefix, driver_merge_below)
        diff = {t: (delta_rows(root, t), source_rows(source, t)) for t in QUERIES}
        if all(a == b for a, b in diff.values()):
            return
        if time.monotonic() > deadline:
            bad = {t: (len(a), len(b)) for t, (a, b) in diff.items() if a != b}
            raise AssertionError(f"Delta tables differ from the source: {bad}")
        time.sleep(1)


# 0: every commit by delta-spark; 100,000: the CLI's default, the shop's batches merged on the
# driver by delta-rs (spark_merge.py)
@pytest.mark.parametrize("below", [0, 100_000], ids=["delta-spark", "on-the-driver"])
def test_the_spark_route_loads_merges_and_resumes_from_delta(spark_native, stack, source, prefix,
                                                            start, tmp_path, below):
    execute(source, SHOP)
    start(allow_unkeyed=True)
    wait_streaming(source, prefix)
    root = tmp_path / "warehouse" / prefix
    converge(spark_native, stack, root, prefix, source, driver_merge_below=below)
    items = open_table(root / "public" / "items")
    first = items.transaction_version(f"bottler:{prefix}.items:0")
    assert first is not None  # the offsets are in the commit
    execute(source, *LOAD)
    converge(spark_native, stack, root, prefix, source, driver_merge_below=below)
    items = open_table(root / "public" / "items")  # merged from the offsets Delta recorded
    assert items.transaction_version(f"bottler:{prefix}.items:0") > first
    last = items.history(1)[0]
    assert last["operation"] == "MERGE"
    assert ("delta-rs" in last.get("clientVersion", "")) == bool(below)  # the engine asked
    assert "_bottler_delete" not in items.schema().to_arrow().names  # the flag stays out
    versions = {t: open_table(root / "public" / t).version() for t in QUERIES}
    load(spark_native, stack, root, prefix, below)  # nothing new: no commit
    assert {t: open_table(root / "public" / t).version() for t in QUERIES} == versions
    # messages that do not decode (an unknown schema id; the latest one's, and a body that is
    # not Avro): set aside with their places, the rest merged
    latest = SchemaRegistryClient({"url": stack.registry_url}).get_latest_version(
        f"{prefix}.items-value").schema_id
    junk = [b"\x00\x00\x00\x7f\xffjunk", b"\x00" + latest.to_bytes(4, "big") + b"\xff" * 4]
    producer = Producer({"bootstrap.servers": stack.kafka})
    for value in junk:
        producer.produce(f"{prefix}.items", key=b"not avro", value=value)
    producer.flush(30)
    execute(source, "update items set name = 'after the poison' where id = 3")
    converge(spark_native, stack, root, prefix, source, driver_merge_below=below)
    dead = read_topic(stack.kafka, with_prefix(prefix, DEAD_LETTER))
    assert [m.value() for m in dead] == junk
    assert dict(dead[0].headers())["bottler.topic"] == f"{prefix}.items".encode()
    # the continuous job: a processing-time trigger picks up what comes, then stops when told
    route = SparkRoute(spark_native, root, bootstrap=stack.kafka, registry=stack.registry_url,
                       prefix=prefix, driver_merge_below=below)
    try:
        with in_thread(lambda stop: route.run(stop, 1.0)):
            execute(source, "update items set name = 'continuous' where id = 4")
            wait_for(lambda: delta_rows(root, "items") == source_rows(source, "items"), 120,
                     "the continuous job's merge")
    finally:
        route.close()


def test_batches_checked_for_repeated_keys_dedupe_only_where_one_repeats(
        spark_native, stack, source, prefix, start, tmp_path, monkeypatch):
    monkeypatch.setattr(spark_merge, "REPEATS_CHECKED", 0)  # every batch checked, however small
    execute(source, SHOP)
    start(allow_unkeyed=True)
    wait_streaming(source, prefix)
    root = tmp_path / "warehouse" / prefix
    converge(spark_native, stack, root, prefix, source)  # each key once: appended as it is
    execute(source, *LOAD)
    converge(spark_native, stack, root, prefix, source)  # keys repeated: the last one merged
    execute(source, "update items set name = 'once' where id = 5", "delete from items where id = 6")
    converge(spark_native, stack, root, prefix, source)  # each key once: merged as it is
    assert open_table(root / "public" / "items").history(1)[0]["operation"] == "MERGE"


def test_the_driver_keeps_each_keys_last_change_by_partition_then_offset():
    import pyarrow as pa

    changes = pa.table({"id": [1, 2, 1, 3, 2, 1], "name": ["a", "b", "c", "d", "e", "f"],
                        "_bottler_delete": [False, False, True, False, False, False],
                        "_bottler_partition": [0, 0, 0, 1, 1, 0],
                        "_bottler_offset": [5, 6, 7, 1, 0, 2]})
    last = spark_merge.last_per_key(changes, ["id"])
    assert sorted(last.to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "name": "c", "_bottler_delete": True},  # offset 7 after 5 and 2
        {"id": 2, "name": "e", "_bottler_delete": False},  # a key that moved: the higher partition
        {"id": 3, "name": "d", "_bottler_delete": False}]


def test_a_jar_missing_or_not_matching_is_one_line_naming_the_pin(tmp_path):
    for name in ("spark-sql-kafka-0-10_2.13-4.1.0.jar", "spark-avro_2.13-4.1.0.jar",
                 "delta-spark_4.1_2.13-4.3.0.jar"):
        (tmp_path / name).write_bytes(b"")
    jars.check(tmp_path, "4.1.0", "4.3.1")  # a patch release apart: the same API
    with pytest.raises(BottlerError, match=r"does not match pyspark 4\.2\.0 .*spark\.version"):
        jars.check(tmp_path, "4.2.0", "4.3.0")
    with pytest.raises(BottlerError, match=r"Python package 4\.4\.1 .*delta\.version"):
        jars.check(tmp_path, "4.1.0", "4.4.1")
    delta = tmp_path / "delta-spark_4.1_2.13-4.3.0.jar"
    delta.rename(tmp_path / "delta-spark_4.0_2.13-4.3.0.jar")
    with pytest.raises(BottlerError, match=r"built for Spark 4\.0.*delta\.spark"):
        jars.check(tmp_path, "4.1.0", "4.3.0")
    (tmp_path / "spark-avro_2.13-4.1.0.jar").unlink()
    with pytest.raises(BottlerError, match="spark-avro_2.13 is missing"):
        jars.check(tmp_path, "4.1.0", "4.3.0")


def test_the_routes_jvm_starts_no_python_and_maps_the_class_archive(spark_native):
    """Spark 4.2 starts a Python worker to look up Python data sources at a session's first
    ``format()`` when its JVM finds a Python; the route's finds none, and runs none. Its JVM
    maps the class-data archive (cds.py), built by the session's start if it was missing."""
    import psutil

    (spark_native.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
     .option("subscribe", "none").load())
    spark_native.range(3).write.format("noop").mode("overwrite").save()
    java = [p for p in psutil.Process().children() if p.name() == "java"]
    assert java, "the session's JVM is this process's child"
    # Spark's Python workers are the JVM's children (a shell may be there: `command -v`)
    assert not [p.cmdline() for p in java[0].children(recursive=True)
                if p.name().startswith("python")]
    maps = Path(f"/proc/{java[0].pid}/maps").read_text()
    assert ".jsa" in maps and str(cds.directory()) in maps


def test_the_client_properties_reach_the_java_client():
    options = java_properties({"bootstrap.servers": "b:9093", "security.protocol": "SASL_SSL",
                               "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "u",
                               "sasl.password": 'p"w', "ssl.ca.location": "/ca.pem"})
    assert options["kafka.bootstrap.servers"] == "b:9093"
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="u" '
        'password="p\\"w";')
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.location"] == "/ca.pem"
    assert options["kafka.isolation.level"] == "read_committed"  # the Java client's is not
    assert options["kafka.max.poll.records"] == "10000"  # the Java client's is 500
    assert options["kafka.fetch.max.wait.ms"] == "10"  # the broker holds a fetch 500 ms


TAGS = """
create table tags (id int primary key, names text[], days date[], grid int[][]);
insert into tags select g, array['a' || g, null, 'b'], array['2024-01-01'::date + g],
                        array[[g, 1], [2, 3]] from generate_series(1, 40) g;
"""


def test_two_partitions_array_columns_and_a_truncate(spark_native, stack, source, prefix, start,
                                                      tmp_path):
    """A table topic of two partitions (one commit per partition, each with its own transaction
    identifier), array columns (a lower bound other than 1 dropped, as on the default route), and
    a truncate between two loads: rows before it gone, rows after it kept."""
    import psycopg

    execute(source, TAGS)
    start(partitions=2)
    wait_streaming(source, prefix)
    root = tmp_path / "warehouse" / prefix

    def rows(table_rows):
        return sorted(table_rows, key=repr)

    def same() -> bool:
        with psycopg.connect(source) as conn:
            want = rows(conn.execute("select id, names, days, grid from tags").fetchall())
        delta = open_table(root / "public" / "tags")
        got = [] if delta is None else rows(
            tuple(r.values()) for r in delta.to_pyarrow_table(
                columns=["id", "names", "days", "grid"]).to_pylist())
        return [tuple(r) for r in got] == [tuple(r) for r in want]

    def converge():
        wait_for(lambda: load(spark_native, stack, root, prefix) or same(), 180,
                 "the Delta table equal to the source")

    converge()
    tags = open_table(root / "public" / "tags")
    assert all(tags.transaction_version(f"bottler:{prefix}.tags:{p}") for p in (0, 1))
    execute(source, "update tags set names = '{v}' where id = 7", "truncate tags",
            "insert into tags values (100, '{z}', '{2024-02-02}', '{{5,6}}'), (101, '{}', null,"
            " null), (102, '[0:1]={x,y}', null, null)",
            "update tags set names = '{w}' where id = 100")
    converge()


CLASH = """
create table clash (id int primary key, "partition" int, "offset" bigint, key text, value text,
                    v text, k text);
insert into clash select g, g % 3, g * 10, 'k' || g, 'v' || g, 'v', 'k'
                  from generate_series(1, 30) g;
create table clash_log ("partition" int, "offset" bigint, key text, value text);
insert into clash_log select g % 3, g, 'k' || g, null from generate_series(1, 10) g;
"""


@pytest.mark.parametrize("below", [0, 100_000], ids=["delta-spark", "on-the-driver"])
def test_columns_named_like_the_kafka_rows_own_columns_load_as_theirs(
        spark_native, stack, source, prefix, start, tmp_path, below):
    """A table's columns named as Spark's Kafka rows' (``partition``, ``offset``, ``key``,
    ``value``) or as the decoded structs (``v``, ``k``) hold the table's values, keyed or
    unkeyed, whoever commits."""
    import psycopg

    execute(source, CLASH)
    start(allow_unkeyed=True)
    wait_streaming(source, prefix)
    root = tmp_path / "warehouse" / prefix
    columns = {"clash": ["id", "partition", "offset", "key", "value", "v", "k"],
               "clash_log": ["partition", "offset", "key", "value"]}

    def same() -> bool:
        for table, names in columns.items():
            quoted = ", ".join(f'"{n}"' for n in names)
            with psycopg.connect(source) as conn:
                want = sorted(conn.execute(f"select {quoted} from {table}").fetchall(), key=repr)
            delta = open_table(root / "public" / table)
            got = [] if delta is None else sorted(
                (tuple(r.values()) for r in delta.to_pyarrow_table(columns=names).to_pylist()),
                key=repr)
            if got != want:
                return False
        return True

    def converge():
        wait_for(lambda: load(spark_native, stack, root, prefix, below) or same(), 180,
                 "the Delta tables equal to the source")

    converge()
    execute(source, 'update clash set "offset" = -1, value = null where id = 4',
            "delete from clash where id = 5",
            "insert into clash_log values (9, 99, 'new', 'x')")
    converge()
    last = open_table(root / "public" / "clash").history(1)[0]
    assert ("delta-rs" in last.get("clientVersion", "")) == bool(below)  # the engine asked


def test_a_truncate_read_after_the_rows_that_followed_it(spark_native, stack, tmp_path):
    """Topics are read independently: a truncate event can come in a batch after the rows that
    followed it were applied. Those are read again from the barrier (a batch read of Spark's
    Kafka source) and the table keeps them alone; the event read once more (a crash before the
    truncate topic's offsets were committed) gives the same table."""
    from tests.support.conformance import ITEMS, Stream
    from tests.support.conformance_spark import SparkSink, Topics
    from tests.support.conformance_warehouse import rows

    s = Stream()
    for i in range(5):
        s.upsert(i, name="before")
    s.truncate()
    s.upsert(7, name="after")
    truncate = [c for c in s.changes if c.op == "truncate"]
    sink = SparkSink(spark_native, stack, Topics(stack), tmp_path / "wh")
    try:
        sink.write([c for c in s.changes if c.op != "truncate"], {})
        sink.flush()
        assert len(rows(sink, ITEMS, ("id",))) == 6
        for _ in range(2):  # read, then read again
            sink.write(truncate, {})
            sink.flush()
            assert rows(sink, ITEMS, ("id", "name")) == [(7, "after")]
    finally:
        sink.close()


def test_a_batchs_tables_each_record_their_own_identifiers(spark_native, stack, tmp_path):
    """Two tables merged in one batch record their own topic's transaction identifiers alone
    (the ``txn`` actions of their _delta_log: delta-spark takes them from the session's
    settings, which the batch's commits share), and a topic that fails (a Delta table bottler
    did not write at its path) fails the batch and leaves that table as it was."""
    import dataclasses
    import json

    import pyarrow as pa
    from deltalake import write_deltalake

    from materializers.core import TableId
    from materializers.warehouse.sink import table_path
    from tests.support.conformance import ITEMS, V1, Stream, value_schema
    from tests.support.conformance_spark import SparkSink, Topics

    things, alien = TableId("public", "things"), TableId("public", "alien")

    def on(table: TableId, changes: list) -> list:
        return [dataclasses.replace(c, topic=f"p.{table.table}", table=table,
                                    value_schema=value_schema(table, V1["fields"]))
                for c in changes]

    def txns(table: TableId) -> set[tuple[str, int]]:
        actions = [json.loads(line) for f in (table_path(root, table) / "_delta_log").glob(
            "*.json") for line in f.read_text().splitlines()]
        return {(a["txn"]["appId"], a["txn"]["version"]) for a in actions if "txn" in a}

    topics, root = Topics(stack), tmp_path / "wh"
    sink = SparkSink(spark_native, stack, topics, root)
    sink.route.close()
    sink.route = SparkRoute(spark_native, root, bootstrap=stack.kafka,
                            registry=stack.registry_url, prefix=topics.prefix,
                            topics=[topics.name(f"p.{t.table}") for t in (ITEMS, things, alien)])
    items, more, other = Stream(), Stream(), Stream()
    try:
        for upserts in (3, 4):  # the tables' first rows, then a MERGE into each
            for i in range(upserts):
                items.upsert(i, name=f"i{upserts}")
                more.upsert(i + 1, name=f"t{upserts}")
            more.delete(1)
            sink.write(items.changes[-upserts:] + on(things, more.changes[-upserts - 1:]), {})
            sink.flush()
        app = f"bottler:{topics.prefix}.%s:0"
        assert txns(ITEMS) == {(app % "items", 3), (app % "items", 7)}
        assert txns(things) == {(app % "things", 4), (app % "things", 9)}
        write_deltalake(str(table_path(root, alien)), pa.table({"id": pa.array([9], pa.int32())}))
        items.upsert(0, name="after")
        other.upsert(0)
        sink.write(items.changes[-1:] + on(alien, other.changes), {})
        with pytest.raises(BottlerError, match="did not write"):
            sink.flush()
        assert open_table(table_path(root, alien)).to_pyarrow_table().to_pylist() == [{"id": 9}]
    finally:
        sink.close()
