"""The warehouse sink without Spark: Avro types to Delta types, values Delta cannot hold, type
widening, and the maintenance commands (tables read back with delta-rs)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from typer.testing import CliRunner

from bottler.cli import app
from materializers.core import Change, RejectedChange, TableId
from materializers.warehouse.delta import open_table
from materializers.warehouse.sink import DeltaSink, table_path

T = TableId("public", "rich")
TOPIC = "w.rich"


def field(name, avro, pg_type="text"):
    return {"name": name, "type": ["null", avro], "default": None, "pg.name": name,
            "pg.type": pg_type}


DECIMAL = {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}
INTERVAL = {"type": "record", "name": "Interval", "namespace": "bottler.pg",
            "fields": [{"name": "months", "type": "int"}, {"name": "days", "type": "int"},
                       {"name": "microseconds", "type": "long"}]}
RICH = {"type": "record", "name": "rich", "namespace": "public", "pg.schema": "public",
        "pg.table": "rich", "fields": [
            field("id", "int", "integer"),
            field("price", [DECIMAL, "string"], "numeric(10,2)"),
            field("day", {"type": "int", "logicalType": "date"}, "date"),
            field("at", {"type": "long", "logicalType": "timestamp-micros"}, "timestamptz"),
            field("local", {"type": "long", "logicalType": "local-timestamp-micros"},
                  "timestamp"),
            field("t", {"type": "long", "logicalType": "time-micros"}, "time"),
            field("ints", {"type": "array", "items": ["null", "int"]}, "integer[]"),
            field("days", {"type": "array", "items": ["null", {"type": "int",
                                                               "logicalType": "date"}]}),
            field("span", INTERVAL, "interval"),
            field("span2", "bottler.pg.Interval", "interval"),
            field("tags", {"type": "map", "values": ["null", "string"]}, "hstore"),
            field("u", {"type": "string", "logicalType": "uuid"}, "uuid"),
            field("odd name", "boolean", "boolean"),
        ]}
KEY = {"type": "record", "name": "rich", "namespace": "public.key", "pg.schema": "public",
       "pg.table": "rich", "fields": [{"name": "id", "type": "int"}]}


def upsert(offset, value, schema=RICH, schema_id=1):
    return Change(TOPIC, T, "upsert", {"id": value["id"]}, value, 0, offset, 9, schema_id,
                  KEY, schema)


def feed(sink, changes):
    sink.write(changes, {(TOPIC, 0): changes[-1].offset + 1})
    sink.flush()


def test_avro_types_land_as_delta_types_and_infinities_at_the_ends_of_the_range(tmp_path):
    sink = DeltaSink(tmp_path)
    row = {"id": 1, "price": Decimal("12.30"), "day": 2**31 - 1, "at": -(2**63),
           "local": 1717243200500000, "t": 86400000000, "ints": [1, None],
           "days": [0, -(2**31)], "span": {"months": 1, "days": 2, "microseconds": 3},
           "span2": None, "tags": {"a": "1", "b": None}, "u": "a0eebc99", "odd name": True}
    feed(sink, [upsert(0, row)])
    table = open_table(table_path(tmp_path, T)).to_pyarrow_table()
    types = {f.name: f.type for f in table.schema}
    assert types["price"] == pa.decimal128(10, 2)
    assert types["day"] == pa.date32()
    assert types["at"] == pa.timestamp("us", tz="UTC")
    assert types["local"] == pa.timestamp("us")
    assert types["t"] == pa.int64()
    assert types["ints"].value_type == pa.int32()
    assert types["span"] == types["span2"]
    got = table.to_pylist()[0]
    assert got["price"] == Decimal("12.30")
    assert got["day"] == dt.date(9999, 12, 31)  # infinity
    assert got["at"] == dt.datetime(1, 1, 1, tzinfo=dt.UTC)  # -infinity
    assert got["local"] == dt.datetime(2024, 6, 1, 12, 0, 0, 500000)
    assert got["days"] == [dt.date(1970, 1, 1), dt.date(1, 1, 1)]
    assert got["span"] == {"months": 1, "days": 2, "microseconds": 3}
    assert dict(got["tags"]) == {"a": "1", "b": None}
    assert got["odd_name"] is True  # a character Delta refuses in names becomes _


def test_a_value_delta_cannot_hold_is_rejected_alone(tmp_path):
    sink = DeltaSink(tmp_path)
    good = upsert(0, {"id": 1, "price": Decimal("1")})
    nan = upsert(1, {"id": 2, "price": "NaN"})
    bc = upsert(2, {"id": 3, "day": -800000})  # a BC date
    for bad in (nan, bc):
        with pytest.raises(RejectedChange) as caught:
            sink.write([good, bad], {(TOPIC, 0): 3})
        assert caught.value.change is bad
    feed(sink, [good])
    assert open_table(table_path(tmp_path, T)).to_pyarrow_table(columns=["id"]).to_pylist() \
        == [{"id": 1}]


def test_a_column_widened_at_the_source_widens_the_delta_table(tmp_path):
    small = {**RICH, "fields": [field("id", "int", "integer"), field("n", "int", "integer")]}
    big = {**RICH, "fields": [field("id", "int", "integer"), field("n", "long", "bigint")]}
    sink = DeltaSink(tmp_path)
    feed(sink, [upsert(0, {"id": 1, "n": 5}, small, 1)])
    feed(sink, [upsert(1, {"id": 2, "n": 2**40}, big, 2)])
    feed(sink, [upsert(2, {"id": 3, "n": 7}, small, 1)])  # an older writer, read late
    delta = open_table(table_path(tmp_path, T))
    assert delta.schema().to_arrow().field("n").type == pa.int64()
    assert sorted(delta.to_pyarrow_table().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "n": 5}, {"id": 2, "n": 2**40}, {"id": 3, "n": 7}]
    assert DeltaSink(tmp_path).stored_offsets([(TOPIC, 0)]) == {(TOPIC, 0): 3}
    text = {**RICH, "fields": [field("id", "int", "integer"), field("n", "string")]}
    with pytest.raises(Exception, match="changed type"):
        feed(sink, [upsert(3, {"id": 4, "n": "x"}, text, 3)])


def test_optimize_and_vacuum_keep_rows_and_offsets(tmp_path):
    sink = DeltaSink(tmp_path)
    schema = {**RICH, "fields": [field("id", "int", "integer")]}
    for i in range(6):
        feed(sink, [upsert(i, {"id": i}, schema)])
    path = table_path(tmp_path, T)
    files = len(open_table(path).file_uris())
    runner = CliRunner()
    result = runner.invoke(app, ["warehouse", "optimize", "--path", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "public.rich: 6 files compacted into 1" in result.output
    result = runner.invoke(app, ["warehouse", "vacuum", "--path", str(tmp_path),
                                 "--retention-hours", "0"])
    assert result.exit_code == 0, result.output
    assert "public.rich: 6 files deleted" in result.output
    delta = open_table(path)
    assert files == 6 and len(delta.file_uris()) == 1
    assert sorted(r["id"] for r in delta.to_pyarrow_table().to_pylist()) == list(range(6))
    assert DeltaSink(tmp_path).stored_offsets([(TOPIC, 0)]) == {(TOPIC, 0): 6}
    result = runner.invoke(app, ["warehouse", "optimize", "--path", str(tmp_path / "none")])
    assert result.exit_code != 0


def test_a_delta_table_bottler_did_not_write_is_never_written_into(tmp_path):
    """Issue 25, the same class as the views' harms: a Delta table of the user's at a table's
    path is refused, by a truncate as by an upsert, and keeps its rows; bottler's own table is
    written into by a later sink."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from common.errors import BottlerError

    path = table_path(tmp_path, T)
    write_deltalake(str(path), pa.table({"id": pa.array([999], pa.int32()), "v": ["user"]}))
    sink = DeltaSink(tmp_path)
    assert sink.stored_offsets([(TOPIC, 0)]) == {}
    truncate = Change(TOPIC, T, "truncate", None, None, 0, 0, barrier={0: 0})
    for changes in ([truncate], [upsert(0, {"id": 1})]):
        with pytest.raises(BottlerError, match="did not write"):
            sink.write(changes, {(TOPIC, 0): 1})
    assert open_table(path).to_pyarrow_table().to_pylist() == [{"id": 999, "v": "user"}]

    other = TableId("public", "mine")
    theirs = Change(TOPIC, other, "upsert", {"id": 1}, {"id": 1}, 0, 0, 9, 1, KEY,
                    {**RICH, "name": "mine", "pg.table": "mine", "fields": RICH["fields"][:1]})
    feed(DeltaSink(tmp_path), [theirs])
    later = DeltaSink(tmp_path)
    assert later.stored_offsets([(TOPIC, 0)]) == {(TOPIC, 0): 1}
    feed(later, [Change(TOPIC, other, "truncate", None, None, 0, 1, barrier={0: 1})])
    assert open_table(table_path(tmp_path, other)).to_pyarrow_table().num_rows == 0
