"""The evolution rule end to end (issue 16): a real capture of ``ALTER TABLE accounts ADD COLUMN
region text DEFAULT 'eu'`` among writes; the replica, the search index and the warehouse (the
Spark job, as it ships) all show the default on the rows written before the column existed, and
their own value (NULL included) on the others, as the source does."""

from __future__ import annotations

import uuid

import psycopg

from materializers.core import TableId
from materializers.postgres import PostgresSink
from materializers.search.client import SearchClient
from materializers.search.sink import SearchSink
from materializers.warehouse.delta import open_table
from materializers.warehouse.job import WarehouseJob
from tests.support.conformance_search import documents
from tests.support.databases import execute, fresh_database
from tests.support.views import converge, loop
from tests.support.waiting import wait_streaming

ACCOUNTS = TableId("public", "accounts")
WRITES = [
    "update accounts set name = 'early' where id <= 5",
    "alter table accounts add column region text default 'eu'",
    "insert into accounts values (201, 'new', 'us'), (202, 'no region', null)",
    "update accounts set region = 'fr' where id = 3",
    "update accounts set name = 'late' where id = 4",  # rewritten after: 'eu' from the source
]


def source_rows(dsn: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("select id, name, region from accounts order by id").fetchall()


def test_every_view_shows_an_added_columns_default_on_older_rows(stack, source, prefix, start,
                                                                 spark, tmp_path):
    execute(source, "create table accounts (id int primary key, name text)",
            "insert into accounts select g, 'a' || g from generate_series(1, 200) g")
    start()
    wait_streaming(source, prefix)
    execute(source, *WRITES)
    expected = source_rows(source)
    assert expected[0][2] == "eu" and expected[2][2] == "fr" and expected[-1][2] is None

    with fresh_database(stack.pg_dsn) as target:  # the replica
        group = f"g-{uuid.uuid4().hex[:8]}"

        def replica() -> list[tuple]:
            with psycopg.connect(target) as conn:
                try:
                    return conn.execute("select id, name, region from accounts").fetchall()
                except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn):
                    return []  # the replica has not applied the table or the ALTER yet

        def run_replica() -> None:
            sink = PostgresSink(target, group)
            try:
                loop(stack, prefix, sink, group)
            finally:
                sink.close()

        converge(replica, expected, run_replica)

    client = SearchClient(stack.search_url)  # the search index
    index = f"evolution-{uuid.uuid4().hex[:8]}"
    sinks: list[SearchSink] = []

    def run_search() -> None:
        sink = SearchSink(client, index)
        sinks.append(sink)
        loop(stack, prefix, sink, sink.group_id)

    def search() -> list[tuple]:
        return [(d["id"], d["name"], d.get("region")) for d in documents(sinks[-1], ACCOUNTS)]

    try:
        converge(search, expected, run_search)
    finally:
        for sink in sinks:
            sink.close()
        client.request("DELETE", f"/{index}")

    root = tmp_path / "warehouse"  # the warehouse, as the Spark job writes it

    def run_warehouse() -> None:
        load = WarehouseJob(spark, str(root), bootstrap=stack.kafka,
                            registry=stack.registry_url, prefix=prefix)
        try:
            load.run_until_caught_up()
        finally:
            load.close()

    def warehouse() -> list[tuple]:
        table = open_table(root / prefix / "public" / "accounts")
        if table is None:
            return []
        names = table.schema().to_arrow().names
        return [(r["id"], r["name"], r.get("region")) for r in
                table.to_pyarrow_table(columns=[c for c in ("id", "name", "region")
                                                if c in names]).to_pylist()]

    converge(warehouse, expected, run_warehouse)
