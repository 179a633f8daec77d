"""DDL that changes existing rows without a row change in the WAL, end to end (issue 25): a real
capture of ``RENAME COLUMN``, of ``ALTER COLUMN … TYPE … USING`` and of ``ADD COLUMN`` with a
volatile default. The capture publishes the table again (capture/stream/schema_changes.py); the
replica (live, and rebuilt from offset zero), the search index and the warehouse (the Spark job,
as it ships) all end equal to the source, and the replica renames its column in place."""

from __future__ import annotations

import logging
import uuid

import psycopg

from materializers.core import TableId
from materializers.postgres import PostgresSink
from materializers.search.client import SearchClient
from materializers.search.sink import SearchSink
from materializers.warehouse.delta import open_table
from materializers.warehouse.job import WarehouseJob
from tests.support.conformance_search import documents
from tests.support.databases import execute, fresh_database, rows
from tests.support.views import converge, loop
from tests.support.waiting import wait_streaming

ROWS = 300


class Views:
    """The three views of one capture, each read back as sorted tuples of ``columns``."""

    def __init__(self, stack, prefix: str, spark, root, table: TableId):
        self.stack, self.prefix, self.spark, self.root, self.table = (
            stack, prefix, spark, root, table)

    def replica(self, target: str, group: str, columns: list[str]):
        def read() -> list[tuple]:
            with psycopg.connect(target) as conn:
                try:
                    return conn.execute(
                        f"select {', '.join(columns)} from {self.table.table}").fetchall()
                except psycopg.errors.UndefinedColumn:  # the change has not reached it yet
                    return []

        def run() -> None:
            sink = PostgresSink(target, group)
            try:
                loop(self.stack, self.prefix, sink, group)
            finally:
                sink.close()
        return read, run

    def search(self, columns: list[str], sinks: list[SearchSink], index: str):
        client = SearchClient(self.stack.search_url)

        def run() -> None:
            sink = SearchSink(client, index)
            sinks.append(sink)
            loop(self.stack, self.prefix, sink, sink.group_id)

        def read() -> list[tuple]:
            return [tuple(d.get(c) for c in columns) for d in documents(sinks[-1], self.table)]
        return read, run

    def warehouse(self, columns: list[str]):
        def run() -> None:
            job = WarehouseJob(self.spark, str(self.root), bootstrap=self.stack.kafka,
                               registry=self.stack.registry_url, prefix=self.prefix)
            try:
                job.run_until_caught_up()
            finally:
                job.close()

        def read() -> list[tuple]:
            table = open_table(self.root / self.prefix / self.table.schema / self.table.table)
            if table is None:
                return []
            names = table.schema().to_arrow().names
            data = table.to_pyarrow_table(columns=[c for c in columns if c in names]).to_pylist()
            return [tuple(r.get(c) for c in columns) for r in data]
        return read, run


def search_index() -> str:
    return f"rewrites-{uuid.uuid4().hex[:8]}"


def test_a_renamed_column_keeps_its_values_in_every_view(stack, source, prefix, start, spark,
                                                         tmp_path, caplog):
    execute(source, "create table sc (id int primary key, a text, b int)",
            f"insert into sc select g, 'a' || g, g from generate_series(1, {ROWS}) g")
    start()
    wait_streaming(source, prefix)
    views = Views(stack, prefix, spark, tmp_path / "warehouse", TableId("public", "sc"))
    before = rows(source, "select id, a, b from sc order by id")
    with fresh_database(stack.pg_dsn) as live:
        group = f"g-{uuid.uuid4().hex[:8]}"
        read, run = views.replica(live, group, ["id", "a", "b"])
        converge(read, before, run)  # a replica that ran all along: the table with column a

        with caplog.at_level(logging.INFO, logger="capture"):
            execute(source, "alter table sc rename column a to a2",
                    "update sc set b = -1 where id = 1")  # the next change brings the rename
            after = rows(source, "select id, a2, b from sc order by id")
            assert after[1] == (2, "a2", 2) and after[0] == (1, "a1", -1)

            read, run = views.replica(live, group, ["id", "a2", "b"])
            converge(read, after, run)
        assert any("column a renamed to a2" in r.getMessage() for r in caplog.records)
        with psycopg.connect(live) as conn:  # renamed in place: no column dropped and added
            assert conn.execute(
                "select attname, attisdropped from pg_attribute where attrelid = 'sc'::regclass"
                " and attnum > 0 order by attnum").fetchall() == [
                    ("id", False), ("a2", False), ("b", False)]

    with fresh_database(stack.pg_dsn) as rebuilt:  # a rebuild from offset zero
        read, run = views.replica(rebuilt, f"g-{uuid.uuid4().hex[:8]}", ["id", "a2", "b"])
        converge(read, after, run)

    sinks: list[SearchSink] = []
    index = search_index()
    try:
        read, run = views.search(["id", "a2", "b", "a"], sinks, index)
        converge(read, [(*r, None) for r in after], run)  # nothing left under the old name
    finally:
        for sink in sinks:
            sink.close()
        SearchClient(stack.search_url).request("DELETE", f"/{index}")

    read, run = views.warehouse(["id", "a2", "b", "a"])
    converge(read, [(*r, None) for r in after], run)


def test_a_rewrite_of_every_row_reaches_every_view(stack, source, prefix, start, spark,
                                                   tmp_path):
    """``ALTER COLUMN … TYPE … USING`` rewrites every row's value; ``ADD COLUMN … DEFAULT
    md5(random()::text)`` gives each older row its own value: neither is in the WAL."""
    execute(source, "create table tc (id int primary key, b int, v text)",
            f"insert into tc select g, g, 'v' from generate_series(1, {ROWS}) g")
    start()
    wait_streaming(source, prefix)
    views = Views(stack, prefix, spark, tmp_path / "warehouse", TableId("public", "tc"))
    with fresh_database(stack.pg_dsn) as live:
        group = f"g-{uuid.uuid4().hex[:8]}"
        read, run = views.replica(live, group, ["id", "b"])
        converge(read, rows(source, "select id, b from tc order by id"), run)

        execute(source, "alter table tc alter column b type bigint using b * 100",
                "alter table tc add column r text default md5(random()::text)",
                "update tc set v = 'x' where id = 1")
        columns = ["id", "b", "r"]
        expected = rows(source, "select id, b, r from tc order by id")
        assert expected[1][1] == 200 and expected[1][2] is not None

        read, run = views.replica(live, group, columns)
        converge(read, expected, run)

    with fresh_database(stack.pg_dsn) as rebuilt:
        read, run = views.replica(rebuilt, f"g-{uuid.uuid4().hex[:8]}", columns)
        converge(read, expected, run)

    sinks: list[SearchSink] = []
    index = search_index()
    try:
        read, run = views.search(columns, sinks, index)
        converge(read, expected, run)
    finally:
        for sink in sinks:
            sink.close()
        SearchClient(stack.search_url).request("DELETE", f"/{index}")

    read, run = views.warehouse(columns)
    converge(read, expected, run)


def test_ddl_that_no_row_change_follows_still_reaches_the_views(stack, source, prefix, start):
    """No Relation message ever describes a table nobody writes to after its DDL: the capture
    finds the change in the catalog (capture/stream/drift.py)."""
    execute(source, "create table sd (id int primary key, a text, b int)",
            f"insert into sd select g, 'a' || g, g from generate_series(1, {ROWS}) g")
    start()
    wait_streaming(source, prefix)
    views = Views(stack, prefix, None, None, TableId("public", "sd"))
    with fresh_database(stack.pg_dsn) as live:
        group = f"g-{uuid.uuid4().hex[:8]}"
        read, run = views.replica(live, group, ["id", "a", "b"])
        converge(read, rows(source, "select id, a, b from sd order by id"), run)

        # a2's values do not convert to integer as text: the replica empties the column, and
        # the table's re-publication fills it
        execute(source, "alter table sd rename column a to a2",
                "alter table sd alter column a2 type int using length(a2)",
                "alter table sd alter column b type text using 'b' || b")
        expected = rows(source, "select id, a2, b from sd order by id")
        assert expected[0] == (1, 2, "b1")
        read, run = views.replica(live, group, ["id", "a2", "b"])
        converge(read, expected, run)


def test_a_renamed_enum_value_reaches_the_views(stack, source, prefix, start):
    """``ALTER TYPE … RENAME VALUE`` changes every row holding the value, none of them in the WAL,
    and no Relation message says so: the capture publishes the tables using the type again."""
    execute(source, "create type mood as enum ('sad', 'ok')",
            "create table e (id int primary key, m mood, ms mood[])",
            f"insert into e select g, case when g % 2 = 0 then 'sad' else 'ok' end::mood,"
            f" array['sad', 'ok']::mood[] from generate_series(1, {ROWS}) g")
    start()
    wait_streaming(source, prefix)
    query = "select id, m::text, ms::text from e order by id"
    views = Views(stack, prefix, None, None, TableId("public", "e"))
    with fresh_database(stack.pg_dsn) as live:
        group = f"g-{uuid.uuid4().hex[:8]}"
        read, run = views.replica(live, group, ["id", "m::text", "ms::text"])
        converge(read, rows(source, query), run)
        execute(source, "alter type mood rename value 'sad' to 'blue'")
        expected = rows(source, query)
        assert expected[1] == (2, "blue", "{blue,ok}")
        converge(read, expected, run)
