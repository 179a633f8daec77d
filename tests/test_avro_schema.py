"""schemas/avro_schema.py: record schemas for a table's key and value, and row encoders."""

from __future__ import annotations

import io
import json
from decimal import Decimal

import avro.schema
import fastavro
import pytest
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from schemas.avro_schema import (
    field_names,
    record_schemas,
    row_encoder,
    row_writer,
    sanitize_name,
    without_logical_types,
)
from schemas.avro_writer import compile_writer
from schemas.pgtypes import Column, PgType, TypeConversionError


def T(name: str, kind: str = "b", category: str = "U", schema: str = "pg_catalog", **kw):
    return PgType(1000, name, schema, kind, category, **kw)


INT4, INT8, TEXT = T("int4"), T("int8"), T("text")
INTERVAL = T("interval")
INT4RANGE = T("int4range", kind="r", category="R", subtype=INT4)
NUMERIC_10_2 = ((10 << 16) | 2) + 4


def col(name, pgtype, **kw) -> Column:
    return Column(name, pgtype, **kw)


def write_read(schema: dict, record: dict, plain: bool = True) -> dict:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), record)
    reader = without_logical_types(schema) if plain else schema
    return fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), fastavro.parse_schema(reader))


def apache_parse(schema: dict):
    """The Apache Avro parser (what the registry uses) must accept the schema too."""
    return avro.schema.parse(json.dumps(schema))


def compatible(reader: dict, writer: dict) -> bool:
    result = ReaderWriterCompatibilityChecker().get_compatibility(
        apache_parse(reader), apache_parse(writer)
    )
    return result.compatibility is SchemaCompatibilityType.compatible


# --------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("customers", "customers"),
        ("Order Items", "Order_Items"),
        ("1st", "_1st"),
        ("a-b.c", "a_b_c"),
        ("caf\u00e9", "caf_"),
        ("_x9", "_x9"),
        ("", "_"),
        ("\U0001f600", "_"),
    ],
)
def test_sanitize_name(name, expected):
    assert sanitize_name(name) == expected


def test_field_names_keep_distinct_columns_distinct():
    columns = [col(n, TEXT) for n in ("a_b", "a-b", "a b", "1x", "_1x", "ok")]
    names = field_names(columns)
    assert names[0] == "a_b"  # valid as is: keeps its name
    assert names[1].startswith("a_b_") and names[2].startswith("a_b_")
    assert len(set(names)) == len(names)
    assert names[3] == "_1x_" + names[3].rsplit("_", 1)[1] and names[4] == "_1x"
    assert names[5] == "ok"
    # stable: the hash depends on the original name only
    assert field_names([col("a-b", TEXT), col("a_b", TEXT)])[0] == names[1]
    # a lone invalid name is just sanitised
    assert field_names([col("a-b", TEXT)]) == ["a_b"]


def test_field_names_never_collide_with_a_hashed_name():
    first = field_names([col("a-b", TEXT), col("a b", TEXT)])
    crafted = field_names([col("a-b", TEXT), col("a b", TEXT), col(first[0], TEXT)])
    assert len(set(crafted)) == 3 and crafted[2] == first[0]


def test_duplicate_column_names_are_refused():
    with pytest.raises(ValueError, match="duplicate"):
        field_names([col("a", TEXT), col("a", INT4)])


# --------------------------------------------------------------------------- record schemas


def _table() -> list[Column]:
    return [
        col("id", INT8, not_null=True, formatted="bigint"),
        col("Order Total", T("numeric"), typmod=NUMERIC_10_2, formatted="numeric(10,2)"),
        col("name", TEXT, formatted="text"),
        col("waited", INTERVAL, formatted="interval"),
        col("paused", INTERVAL, formatted="interval"),
        col(
            "pauses",
            T("_interval", category="A", element=INTERVAL),
            ndims=1,
            formatted="interval[]",
        ),
        col("seats", INT4RANGE, formatted="int4range"),
        col(
            "more seats",
            T("int4multirange", kind="m", category="R", subtype=INT4RANGE),
            formatted="int4multirange",
        ),
        col("tags", T("hstore", schema="public"), formatted="hstore"),
    ]


def test_value_schema_fields_are_nullable_with_pg_attributes():
    key, value = record_schemas("public", "orders", _table(), ["id"])
    assert value["type"] == "record" and value["name"] == "orders"
    assert value["namespace"] == "public"
    assert value["pg.schema"] == "public" and value["pg.table"] == "orders"
    by_name = {f["name"]: f for f in value["fields"]}
    assert list(by_name) == [
        "id",
        "Order_Total",
        "name",
        "waited",
        "paused",
        "pauses",
        "seats",
        "more_seats",
        "tags",
    ]
    for field in value["fields"]:
        assert field["type"][0] == "null" and field["default"] is None
    assert by_name["id"]["pg.notnull"] is True and "pg.notnull" not in by_name["name"]
    assert by_name["Order_Total"]["pg.name"] == "Order Total"
    assert by_name["Order_Total"]["pg.type"] == "numeric(10,2)"
    assert by_name["Order_Total"]["type"] == [
        "null",
        {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
        "string",
    ]
    fastavro.parse_schema(value)
    apache_parse(value)


def test_key_schema_is_plain_and_separately_named():
    key, value = record_schemas("sales", "orders", _table(), ["id", "name"])
    assert key["name"] == "orders" and key["namespace"] == "sales.key"
    assert [f["name"] for f in key["fields"]] == ["id", "name"]
    assert key["fields"][0]["type"] == "long" and "default" not in key["fields"][0]
    assert key["fields"][0]["pg.name"] == "id"
    fastavro.parse_schema(key)
    apache_parse(key)
    assert record_schemas("sales", "orders", _table(), [])[0] is None
    with pytest.raises(ValueError, match="not in the table"):
        record_schemas("sales", "orders", _table(), ["nope"])


def test_key_field_names_match_the_value_field_names():
    columns = [col("a-b", TEXT), col("a_b", TEXT), col("x", INT4)]
    key, value = record_schemas("public", "t", columns, ["a-b"])
    assert key["fields"][0]["name"] == value["fields"][0]["name"] != "a_b"
    assert row_encoder(columns, ["a-b"])(["k", "v", None]) == {key["fields"][0]["name"]: "k"}


def test_named_types_used_several_times_are_defined_once():
    _, value = record_schemas("public", "orders", _table(), ["id"])
    text = json.dumps(value)
    assert text.count('"name": "Interval"') == 1
    # paused, pauses, and the elements of pauses' general array record
    assert text.count('"bottler.pg.Interval"') == 3
    assert text.count('"name": "int4range"') == 1
    assert text.count('"bottler.pg.int4range"') == 1  # the multirange's items
    fastavro.parse_schema(value)
    apache_parse(value)
    # the key schema is a document of its own: it defines what it uses
    key, _ = record_schemas("public", "orders", _table(), ["paused"])
    assert json.dumps(key).count('"name": "Interval"') == 1
    fastavro.parse_schema(key)


def test_names_are_sanitised_and_schemas_with_odd_names_are_valid():
    columns = [col("1st value", INT4), col("naïve", TEXT), col("x", INTERVAL)]
    key, value = record_schemas("My-Schema", "2024 orders", columns, ["1st value"])
    assert value["name"] == "_2024_orders" and value["namespace"] == "My_Schema"
    assert [f["name"] for f in value["fields"]] == ["_1st_value", "na_ve", "x"]
    fastavro.parse_schema(value)
    apache_parse(key)


def test_add_and_drop_column_are_backward_compatible():
    before = record_schemas("public", "t", _table()[:3], ["id"])[1]
    after = record_schemas("public", "t", _table(), ["id"])[1]
    assert compatible(reader=after, writer=before)  # ADD COLUMN
    assert compatible(reader=before, writer=after)  # DROP COLUMN
    old = write_read(before, {"id": 1, "Order_Total": Decimal("1.00"), "name": "x"})
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(before), old)
    new = fastavro.schemaless_reader(
        io.BytesIO(buf.getvalue()), fastavro.parse_schema(before), fastavro.parse_schema(after)
    )
    assert new["tags"] is None and new["id"] == 1


def test_enum_label_changes_keep_the_schema_compatible():
    mood1 = T("mood", kind="e", category="E", schema="public", labels=("a",))
    mood2 = T("mood", kind="e", category="E", schema="public", labels=("a", "b"))
    v1 = record_schemas("public", "t", [col("m", mood1)], [])[1]
    v2 = record_schemas("public", "t", [col("m", mood2)], [])[1]
    assert v2["fields"][0]["type"][1]["pg.enum"] == ["a", "b"]
    assert compatible(v2, v1) and compatible(v1, v2)


# --------------------------------------------------------------------------- encoders


def test_row_encoder_round_trips_through_fastavro():
    columns = _table()
    _, value = record_schemas("public", "orders", columns, ["id"])
    encode = row_encoder(columns)
    row = [
        "7",
        "12.30",
        "x",
        "P1D",
        "PT-1S",
        "{P1M,NULL}",
        "[1,5)",
        "{[1,2),[3,4)}",
        '"a"=>"1", "b"=>NULL',
    ]
    record = encode(row)
    assert record == {
        "id": 7,
        "Order_Total": Decimal("12.30"),
        "name": "x",
        "waited": {"months": 0, "days": 1, "microseconds": 0},
        "paused": {"months": 0, "days": 0, "microseconds": -1_000_000},
        "pauses": [{"months": 1, "days": 0, "microseconds": 0}, None],
        "seats": {
            "empty": False,
            "lower": 1,
            "upper": 5,
            "lower_inclusive": True,
            "upper_inclusive": False,
        },
        "more_seats": [
            {
                "empty": False,
                "lower": 1,
                "upper": 2,
                "lower_inclusive": True,
                "upper_inclusive": False,
            },
            {
                "empty": False,
                "lower": 3,
                "upper": 4,
                "lower_inclusive": True,
                "upper_inclusive": False,
            },
        ],
        "tags": {"a": "1", "b": None},
    }
    assert write_read(value, record) == record
    nulls = encode(["8"] + [None] * (len(columns) - 1))
    assert write_read(value, nulls) == nulls and nulls["name"] is None
    special = encode(["9", "NaN"] + [None] * (len(columns) - 2))
    assert write_read(value, special)["Order_Total"] == "NaN"


def test_row_encoder_errors_name_the_column():
    columns = [col("id", INT8), col("when", T("date"), formatted="date")]
    encode = row_encoder(columns)
    with pytest.raises(TypeConversionError, match="date value 'soon' in column 'when'"):
        encode(["1", "soon"])
    with pytest.raises(ValueError, match="row has 3 values"):
        encode(["1", None, None])
    with pytest.raises(ValueError, match="row has 1 values"):
        encode(["1"])


def test_key_encoder_refuses_null_keys_and_ignores_other_columns():
    columns = [col("a", TEXT), col("id", INT8), col("b", TEXT)]
    encode = row_encoder(columns, ["id", "a"])
    assert encode(["x", "5", None]) == {"id": 5, "a": "x"}
    with pytest.raises(TypeConversionError, match="in column 'a': a key column is NULL"):
        encode([None, "5", "b"])
    with pytest.raises(TypeConversionError, match="column 'id'"):
        encode(["x", None, "b"])


def test_encoders_of_odd_shapes():
    assert row_encoder([])([]) == {}
    assert row_encoder([col("only", INT4)])(("3",)) == {"only": 3}
    assert row_encoder([col("t", TEXT)])([None]) == {"t": None}


def test_a_row_writer_writes_what_the_record_writer_writes_of_the_encoders_dict():
    """The capture's path (texts straight to bytes) against the dict's (row_encoder, then the
    schema's writer): the same bytes for the key and the value, NULLs, specials and odd shapes
    included; where the dict's way raises, so does the row writer."""
    columns = _table()
    key, value = record_schemas("public", "orders", columns, ["id"])
    rows = [["7", "12.30", "x", "P1D", "PT-1S", "{P1M,NULL}", "[1,5)", "{[1,2),[3,4)}",
             '"a"=>"1", "b"=>NULL'],
            ["8"] + [None] * (len(columns) - 1),
            ("9", "NaN", "ü" * 9000) + (None,) * (len(columns) - 3)]
    prefix = b"\x00\x00\x00\x00\x07"
    for schema, keys in ((value, None), (key, ["id"])):
        fast = row_writer(columns, schema, keys, prefix)
        slow = compile_writer(schema, prefix)
        encode = row_encoder(columns, keys)
        for row in rows:
            assert fast(row) == slow(encode(row)), row
        null_key = [[None] * len(columns)] if keys else []  # a value's fields all take null
        for bad in [["x"] + [None] * (len(columns) - 1), ["1"], *null_key]:
            with pytest.raises((ValueError, TypeError)):
                encode(bad)
            with pytest.raises(Exception):  # noqa: B017, PT011 - plain: the caller goes the dict's way
                fast(bad)
    only = [col("only", INT4)]
    assert row_writer(only, record_schemas("s", "t", only, [])[1])(("3",)) == b"\x02\x06"
    assert row_writer([], record_schemas("s", "t", [], [])[1])(()) == b""


def test_without_logical_types_reads_values_datetime_cannot_hold():
    columns = [
        col("d", T("date")),
        col("ts", T("timestamptz")),
        col("t", T("time")),
        col("n", T("numeric"), typmod=NUMERIC_10_2),
        col("u", T("uuid")),
    ]
    _, value = record_schemas("public", "t", columns, [])
    record = row_encoder(columns)(
        [
            "infinity",
            "0044-03-15 12:00:00+00 BC",
            "24:00:00",
            "1.50",
            "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
        ]
    )
    with pytest.raises((OverflowError, ValueError)):
        write_read(value, record, plain=False)  # fastavro's datetime conversion gives up
    back = write_read(value, record)
    assert back == record
    assert isinstance(back["n"], Decimal)  # decimals are kept by default
    stripped = without_logical_types(value)
    assert "logicalType" not in json.dumps(stripped["fields"][0])
    assert "decimal" in json.dumps(stripped)
    assert "decimal" not in json.dumps(without_logical_types(value, keep=()))


def test_the_array_union_is_a_backward_compatible_change_and_so_is_a_temporal_mode_switch():
    from schemas.registry_server import compatibility
    from schemas.temporal import plain_temporal

    def parse(schema):
        return compatibility.parse(json.dumps(schema))

    declared_only = {"type": "record", "name": "t", "namespace": "public", "fields": [
        {"name": "a", "type": ["null", {"type": "array", "items": ["null", "int"]}],
         "default": None}]}
    array = PgType(1007, "_int4", "pg_catalog", "b", "A", element=INT4)
    _, union = record_schemas("public", "t", [Column("a", array, ndims=1)], [])
    assert compatibility.check("BACKWARD", parse(union), [(1, parse(declared_only))]) == []
    assert compatibility.check("FORWARD", parse(union), [(1, parse(declared_only))])
    _, value = record_schemas("public", "orders", _table(), ["id"])
    assert compatibility.check("FULL", parse(plain_temporal(value)), [(1, parse(value))]) == []
