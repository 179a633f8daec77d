"""The conformance suite every materializer passes, parametrised by sink.

Each sink comes with a small adapter reading its table state back as ``{key tuple: row tuple}``
(for unkeyed tables: the sorted list of rows). The changes are made here, with the schemas the
capture writes (``pg.*`` attributes included), and fed through the Sink protocol the way the
consumer loop feeds it (write, flush; stored offsets at a restart); one test runs the real loop
over a real topic. To add a materializer: add a factory and an adapter to ``SINKS``.
"""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from decimal import Decimal

import psycopg
import pytest

from materializers.core import MemorySink, TableId
from materializers.postgres import PostgresSink
from materializers.postgres.ddl import qualified, quote
from tests.support.conformance import (
    ITEMS,
    LOG,
    TOPIC,
    UNKEYED_TOPIC,
    V1,
    V2,
    V3,
    V4,
    V5,
    Adapter,
    Stream,
    feed,
    offsets_of,
)
from tests.support.databases import fresh_database

# -- sinks and their adapters ------------------------------------------------------------------


def _memory_keyed(sink: MemorySink, table: TableId, columns: Sequence[str]) -> dict:
    return {tuple(v for _, v in identity): tuple(row.get(c) for c in columns)
            for identity, row in sink.rows(*table).items()}


def _memory_unkeyed(sink: MemorySink, table: TableId, columns: Sequence[str]) -> list:
    return sorted(tuple(row.get(c) for c in columns) for row in sink.rows(*table).values())


def _pg_rows(sink: PostgresSink, table: TableId, columns: Sequence[str]) -> list[tuple]:
    with psycopg.connect(sink.target_dsn) as conn:
        if conn.execute("select to_regclass(%s)", (qualified(table),)).fetchone()[0] is None:
            return []
        cols = ", ".join(quote(c) for c in columns)
        return conn.execute(f"select {cols} from {qualified(table)}").fetchall()


def _pg_keyed(sink: PostgresSink, table: TableId, columns: Sequence[str]) -> dict:
    return {(row[0],): tuple(row) for row in _pg_rows(sink, table, columns)}  # key: 1st column


def _pg_unkeyed(sink: PostgresSink, table: TableId, columns: Sequence[str]) -> list:
    return sorted(_pg_rows(sink, table, columns))


# Materializers whose adapter lives in a module of its own: ``adapter(request, cleanup)``
# returns the Adapter (``request`` gives fixtures such as ``stack``; ``cleanup`` is an ExitStack
# closed after the test).
ADAPTER_MODULES = {"search": "tests.support.conformance_search",
                   "warehouse": "tests.support.conformance_warehouse",
                   "spark": "tests.support.conformance_spark",
                   "spark-driver": "tests.support.conformance_spark",
                   "spark-connect": "tests.support.conformance_spark"}


# the postgres and search sinks write to the stack's services (asked for by name, below)
@pytest.fixture(params=["memory", pytest.param("postgres", marks=pytest.mark.stack),
                        pytest.param("search", marks=pytest.mark.stack), "warehouse",
                        pytest.param("spark", marks=pytest.mark.stack),
                        pytest.param("spark-driver", marks=pytest.mark.stack),
                        pytest.param("spark-connect", marks=pytest.mark.stack)])
def adapter(request) -> Iterator[Adapter]:
    with ExitStack() as cleanup:
        if request.param == "memory":
            yield Adapter(MemorySink, lambda sink: sink, _memory_keyed, _memory_unkeyed)
            return
        if request.param in ADAPTER_MODULES:
            module = importlib.import_module(ADAPTER_MODULES[request.param])
            yield module.adapter(request, cleanup)
            return
        stack = request.getfixturevalue("stack")
        sinks: list[PostgresSink] = []

        def make(dsn: str | None = None, group: str | None = None) -> PostgresSink:
            dsn = dsn or cleanup.enter_context(fresh_database(stack.pg_dsn))
            sink = PostgresSink(dsn, group or f"g-{uuid.uuid4().hex[:8]}")
            sinks.append(sink)
            return sink

        def reopen(old: PostgresSink) -> PostgresSink:
            old.close()  # the process died: its open transaction is gone with its connection
            return make(old.target_dsn, old.group_id)

        yield Adapter(make, reopen, _pg_keyed, _pg_unkeyed)
        for sink in sinks:
            sink.close()


COLUMNS = ("id", "name", "price")


def history() -> Stream:
    s = Stream()
    for i in range(1, 21):
        s.upsert(i, name=f"item {i}", price=Decimal(i) / 4)
    for n in range(30):
        s.upsert(3, name=f"three v{n}", price=Decimal("0.01") * n)
    for i in range(10, 16):
        s.delete(i)
    s.delete(999)  # a delete of a row never seen
    s.upsert(12, name="back", price=None)
    for at in range(5):
        s.log(at, "x")  # the same row text five times: five rows
    return s


def expected_items() -> dict:
    rows = {(i,): (i, f"item {i}", Decimal(i) / 4) for i in range(1, 21) if not 10 <= i < 16}
    rows[(3,)] = (3, "three v29", Decimal("0.29"))
    rows[(12,)] = (12, "back", None)
    return rows


# -- the suite -------------------------------------------------------------------------------


def test_rebuild_from_zero_equals_running_all_along(adapter):
    changes = history().changes
    along, rebuilt = adapter.make(), adapter.make()
    feed(along, changes, batch=adapter.sizes(changes, 3)[0])  # many flushes, as if live
    feed(rebuilt, changes)  # one big batch from offset zero
    assert adapter.keyed(along, ITEMS, COLUMNS) == adapter.keyed(rebuilt, ITEMS, COLUMNS) \
        == expected_items()
    assert adapter.unkeyed(along, LOG, ("at", "name")) == \
        adapter.unkeyed(rebuilt, LOG, ("at", "name")) == [(at, "x") for at in range(5)]


def test_replaying_a_range_is_harmless_and_offsets_are_stored_with_the_data(adapter):
    changes = [c for c in history().changes if c.table == ITEMS]
    sink = adapter.make()
    feed(sink, changes, batch=adapter.sizes(changes, 7)[0])
    again = adapter.reopen(sink)
    stored = again.stored_offsets([(TOPIC, 0), ("other", 0)])
    assert stored == {(TOPIC, 0): len(changes)}
    for start in (0, 17, len(changes) - 3):  # at-least-once: replay from an earlier offset
        feed(again, changes[start:], batch=adapter.sizes(changes, 5)[0])
        assert adapter.keyed(again, ITEMS, COLUMNS) == expected_items()


def test_an_unflushed_batch_is_discarded_at_restart(adapter):
    s = history()
    sink = adapter.make()
    feed(sink, s.changes)
    more = Stream()
    more.offsets = dict(s.offsets)
    more.upsert(1, name="never flushed")
    more.log(99, "never flushed")
    sink.write(more.changes, offsets_of(more.changes))  # the process dies before flush()
    again = adapter.reopen(sink)
    assert again.stored_offsets([(TOPIC, 0)]) == {(TOPIC, 0): s.offsets[TOPIC]}
    assert adapter.keyed(again, ITEMS, COLUMNS)[(1,)] == (1, "item 1", Decimal("0.25"))
    feed(again, more.changes)  # replayed after the restart: applied once
    assert adapter.keyed(again, ITEMS, COLUMNS)[(1,)] == (1, "never flushed", None)
    assert adapter.unkeyed(again, LOG, ("at", "name")).count((99, "never flushed")) == 1


def test_deletes_are_honoured_and_the_last_update_wins_within_and_across_batches(adapter):
    s = Stream()
    s.upsert(1, name="a")
    s.delete(1)
    s.upsert(2, name="b")
    s.upsert(1, name="again")  # re-inserted after its delete, same batch
    s.upsert(3, name="c")
    s.delete(3)
    for n in range(100):
        s.upsert(4, name=f"v{n}", price=Decimal(n))
    for batch in adapter.sizes(s.changes, 1, 4, 1000):
        sink = adapter.make()
        feed(sink, s.changes, batch=batch)
        assert adapter.keyed(sink, ITEMS, COLUMNS) == {
            (1,): (1, "again", None), (2,): (2, "b", None), (4,): (4, "v99", Decimal(99))}


def test_added_and_dropped_columns_flow_through(adapter):
    s = Stream()
    s.upsert(1, V1, name="one", price=Decimal("1.50"))
    s.upsert(2, V1, name="two", price=Decimal("2.50"))
    s.upsert(2, V2, name="two", price=Decimal("2.50"), note="noted")  # ADD COLUMN note
    s.upsert(3, V2, name="three", price=Decimal("3"), note="n3")
    s.upsert(3, V3, name="three", note="n3 again")  # DROP COLUMN price
    s.upsert(4, V3, name="four", note=None)
    for batch in adapter.sizes(s.changes, 1, 2, 100):
        sink = adapter.make()
        feed(sink, s.changes, batch=batch)
        state = adapter.keyed(sink, ITEMS, ("id", "name", "note"))
        assert state == {(1,): (1, "one", None), (2,): (2, "two", "noted"),
                         (3,): (3, "three", "n3 again"), (4,): (4, "four", None)}
        if isinstance(sink, PostgresSink):
            with psycopg.connect(sink.target_dsn) as conn:
                columns = [r[0] for r in conn.execute(
                    "select attname from pg_attribute where attrelid = 'items'::regclass"
                    " and attnum > 0 and not attisdropped order by attnum")]
            assert columns == ["id", "name", "note"]


def test_a_column_added_with_a_default_shows_it_on_older_rows(adapter):
    s = Stream()
    for i in range(1, 4):
        s.upsert(i, V1, name=f"old {i}")  # written before the column existed
    s.upsert(2, V4, name="two", region="us", level=None)  # written with it: its own values
    s.upsert(4, V4, name="four", region=None, level=1)
    s.upsert(5, V4, name="five", region="fr", level=2)
    columns = ("id", "name", "region", "level")
    expected = {(1,): (1, "old 1", "eu", 7), (2,): (2, "two", "us", None),
                (3,): (3, "old 3", "eu", 7), (4,): (4, "four", None, 1),
                (5,): (5, "five", "fr", 2)}
    for batch in adapter.sizes(s.changes, 1, 2, 4, 100):  # the ALTER between batches, in one
        sink = adapter.make()
        feed(sink, s.changes, batch=batch)
        assert adapter.keyed(sink, ITEMS, columns) == expected, f"batches of {batch}"
    # a restart after the column appeared: nothing changes, a later row keeps its NULL
    again = adapter.reopen(sink)
    more = Stream()
    more.offsets = dict(s.offsets)
    more.upsert(6, V4, name="six", region=None, level=None)
    feed(again, more.changes)
    assert adapter.keyed(again, ITEMS, columns) == {**expected, (6,): (6, "six", None, None)}


def test_a_renamed_column_ends_with_every_value_under_its_new_name(adapter):
    """RENAME COLUMN (capture/stream/schema_changes.py): the capture marks the new schema version
    and publishes every row again under it. Each view ends with the values under the new name and
    none under the old; the replica renames its column in place, so the rows not yet published
    again keep their values meanwhile."""
    s = Stream()
    for i in range(1, 4):
        s.upsert(i, V1, name=f"item {i}", price=Decimal(i))
    s.upsert(2, V5, title="two, renamed", price=Decimal(2))  # a change after the rename
    renamed_at = len(s.changes)
    for i in range(1, 4):  # the capture's incremental snapshot of the table
        title = "two, renamed" if i == 2 else f"item {i}"
        s.upsert(i, V5, title=title, price=Decimal(i))
    expected = {(1,): (1, "item 1", Decimal(1)), (2,): (2, "two, renamed", Decimal(2)),
                (3,): (3, "item 3", Decimal(3))}
    for batch in adapter.sizes(s.changes, 1, 2, 100):
        sink = adapter.make()
        feed(sink, s.changes, batch=batch)
        assert adapter.keyed(sink, ITEMS, ("id", "title", "price")) == expected, batch
        if not isinstance(sink, PostgresSink):  # the replica has no such column (below)
            assert {row[1] for row in adapter.keyed(sink, ITEMS, ("id", "name")).values()} \
                == {None}, f"a value left under the old name (batches of {batch})"
    if isinstance(sink, PostgresSink):
        live = adapter.make()
        feed(live, s.changes[:renamed_at])  # before the snapshot: renamed, never NULL
        assert adapter.keyed(live, ITEMS, ("id", "title"))[(1,)] == (1, "item 1")
        with psycopg.connect(live.target_dsn) as conn:
            columns = conn.execute(
                "select attname, attisdropped from pg_attribute"
                " where attrelid = 'items'::regclass and attnum > 0 order by attnum").fetchall()
        assert columns == [("id", False), ("title", False), ("price", False)]  # no drop + add


def test_truncate_empties_the_table_and_keeps_what_comes_after(adapter):
    s = Stream()
    for i in range(10):
        s.upsert(i, name="before")
    s.log(1, "before")
    s.truncate()
    s.upsert(5, name="after")
    s.truncate(LOG, UNKEYED_TOPIC)
    s.log(2, "after")
    for batch in adapter.sizes(s.changes, 1, 3, 100):
        sink = adapter.make()
        feed(sink, s.changes, batch=batch)
        assert adapter.keyed(sink, ITEMS, COLUMNS) == {(5,): (5, "after", None)}
        assert adapter.unkeyed(sink, LOG, ("at", "name")) == [(2, "after")]
        empty = Stream()
        empty.truncate(TableId("public", "never_seen"), "p.never_seen")
        feed(sink, empty.changes)  # a truncate of a table the target never had: harmless


def test_unkeyed_tables_append_every_upsert(adapter):
    s = Stream()
    s.log(1, "a")
    s.log(1, "a")  # a duplicate row is a second row, as in the source
    s.log(2, "b")
    sink = adapter.make()
    feed(sink, s.changes, batch=2)
    assert adapter.unkeyed(sink, LOG, ("at", "name")) == [(1, "a"), (1, "a"), (2, "b")]


def test_the_consumer_loop_rebuilds_what_ran_all_along(adapter, stack):
    from tests.support.loops import Topic

    if not adapter.loop:
        pytest.skip("reads its topics itself: not a sink under the consumer loop")

    topic = Topic(stack)
    for i in range(20):
        topic.put(i, f"v{i}")
    along = adapter.make()
    topic.materializer(along, batch_size=7).run_until_caught_up(timeout=60)
    for i in range(5):
        topic.put(i, None)  # deletes
    topic.put(7, "seven again")
    topic.truncate()
    topic.put(8, "after the truncate")
    topic.materializer(along, group=getattr(along, "group_id", None)).run_until_caught_up(60)
    fresh = adapter.make()
    topic.materializer(fresh).run_until_caught_up(timeout=60)
    table = TableId("public", "t")
    assert adapter.keyed(along, table, ("id", "v")) == adapter.keyed(fresh, table, ("id", "v")) \
        == {(8,): (8, "after the truncate")}


def test_the_warehouse_job_as_it_ships_rebuilds_what_ran_all_along(stack, spark, tmp_path):
    """The warehouse as it ships: WarehouseJob with its DeltaSink (executors stage the rows,
    delta-rs merges them), not the sink under the consumer loop."""
    from materializers.warehouse.job import WarehouseJob
    from tests.support.loops import Topic

    def load(root):
        job = WarehouseJob(spark, str(root), bootstrap=stack.kafka,
                           registry=stack.registry_url, prefix=topic.prefix)
        try:
            return job.run_until_caught_up()
        finally:
            job.close()

    topic = Topic(stack)
    for i in range(20):
        topic.put(i, f"v{i}")
    topic.producer.flush(30)
    along = tmp_path / "along"
    assert load(along).changes == 20
    for i in range(5):
        topic.put(i, None)  # deletes
    topic.put(7, "seven again")
    topic.truncate()
    topic.put(8, "after the truncate")
    topic.producer.flush(30)
    load(along)
    load(tmp_path / "fresh")
    table = TableId("public", "t")
    sinks = [tmp_path / "along" / topic.prefix, tmp_path / "fresh" / topic.prefix]
    got = [{row[0]: row for row in _delta_rows(root, table)} for root in sinks]
    assert got[0] == got[1] == {8: (8, "after the truncate")}
    from materializers.warehouse.delta import open_table
    from materializers.warehouse.sink import table_path

    for root in sinks:
        delta = open_table(table_path(root, table))
        assert delta.transaction_version(f"bottler:{topic.name}:0") == 27
        assert not list((root / "_bottler_staging").glob("*/*"))  # staging removed


def _delta_rows(root, table) -> list[tuple]:
    from materializers.warehouse.sink import DeltaSink
    from tests.support.conformance_warehouse import rows

    return rows(DeltaSink(root), table, ("id", "v"))
