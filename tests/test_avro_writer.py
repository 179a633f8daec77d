"""schemas/avro_writer: compiled Avro encoders, byte for byte what fastavro writes."""

from __future__ import annotations

import copy
import io
import math
import struct
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.avro_schema import record_schemas, row_encoder, without_logical_types
from schemas.avro_writer import (
    AvroTypeError,
    AvroValueError,
    compile_writer,
)
from schemas.pgtypes import Column, PgType
from schemas.serde import AvroEncoder, split

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


def fastavro_bytes(schema, datum) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return buf.getvalue()


def check(schema, datum, write=None) -> bytes:
    """Our bytes equal fastavro's, and fastavro reads them back completely (as plain ints
    for the date/time types, which may lie outside what ``datetime`` holds)."""
    ours = (write or compile_writer(schema))(datum)
    assert ours == fastavro_bytes(schema, datum)
    plain = fastavro.parse_schema(without_logical_types(schema))
    buf = io.BytesIO(ours)
    decoded = fastavro.schemaless_reader(buf, plain, None)
    assert buf.tell() == len(ours), "trailing bytes"
    # what was read writes back to the same bytes (NaN-safe: compares bytes, not values)
    assert fastavro_bytes(without_logical_types(schema), decoded) == ours
    return ours


def record(*fields, name="r", namespace="t") -> dict:
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "fields": [{"name": n, "type": t} for n, t in fields],
    }


def dec(precision: int, scale: int, type_: str = "bytes", **kw) -> dict:
    schema = {"type": type_, "logicalType": "decimal", "precision": precision, "scale": scale}
    return schema | kw


# --------------------------------------------------------------------------- every type

EDGE_INTS = [0, 1, -1, 63, -64, 64, -65, 8191, -8192, 8192, -8193, 2**14, 2**21, 2**28, 2**30]
EDGE_LONGS = EDGE_INTS + [
    2**35,
    2**42,
    2**49,
    2**56,
    2**62,
    -(2**62),
    2**53 + 1,
    LONG_MAX,
    LONG_MIN,
]
EDGE_LONGS += [LONG_MAX - 1, LONG_MIN + 1, 1718000000123456, -1718000000123456]

CASES: list[tuple[str, object, object]] = [
    ("null", "null", None),
    ("true", "boolean", True),
    ("false", "boolean", False),
    *[(f"int {n}", "int", n) for n in [*EDGE_INTS, INT_MAX, INT_MIN, -(2**31) + 1]],
    *[(f"int {-n}", "int", -n) for n in EDGE_INTS],
    *[(f"long {n}", "long", n) for n in EDGE_LONGS],
    *[(f"long {-n}", "long", -n) for n in EDGE_LONGS if n != LONG_MIN],
    *[
        (f"float {x!r}", "float", x)
        for x in [0.0, -0.0, 1.5, 0.1, math.nan, math.inf, -math.inf, 3.4028234663852886e38]
        + [1e300, -1e300, 1e-50, 1.401298464324817e-45, 3]
    ],
    *[
        (f"double {x!r}", "double", x)
        for x in [0.0, -0.0, 0.1, math.nan, -math.nan, math.inf, -math.inf, 5e-324, 1.8e308, 7]
    ],
    ("bytes empty", "bytes", b""),
    ("bytes", "bytes", b"\x00\xff\\'"),
    ("bytes long", "bytes", bytes(range(256)) * 40),
    ("bytearray", "bytes", bytearray(b"ab")),
    ("string empty", "string", ""),
    ("string unicode", "string", "caf\u00e9 \U0001f600 \u4e2d\u6587 \x00 nul"),
    ("string long", "string", "\u00e9" * 5000),
    ("string 8191 bytes", "string", "x" * 8191),
    ("string 8192 bytes", "string", "x" * 8192),
    (
        "record nested",
        record(("a", "int"), ("b", record(("c", "string"), name="inner")), ("d", "double")),
        {"a": 1, "b": {"c": "x"}, "d": 2.5},
    ),
    ("record empty", record(), {}),
    ("record extra keys ignored", record(("a", "int")), {"a": 1, "zzz": object()}),
    (
        "enum",
        {"type": "enum", "name": "E", "symbols": ["a", "b", "c"]},
        "c",
    ),
    ("fixed", {"type": "fixed", "name": "F", "size": 3}, b"abc"),
    ("fixed bytearray", {"type": "fixed", "name": "F", "size": 2}, bytearray(b"ab")),
    ("fixed empty", {"type": "fixed", "name": "F", "size": 0}, b""),
    ("array empty", {"type": "array", "items": "long"}, []),
    ("array", {"type": "array", "items": "long"}, [1, -1, LONG_MAX, LONG_MIN]),
    ("array tuple", {"type": "array", "items": "string"}, ("a", "b")),
    ("array long", {"type": "array", "items": "int"}, list(range(9000))),
    (
        "nested arrays of unions",
        {"type": "array", "items": ["null", {"type": "array", "items": ["null", "long"]}]},
        [[1, None, 2**40], None, [], [None]],
    ),
    (
        "records in arrays",
        {"type": "array", "items": record(("x", ["null", "int"]), ("y", "string"))},
        [{"x": 1, "y": "a"}, {"x": None, "y": ""}, {"y": "missing x is null"}],
    ),
    ("map empty", {"type": "map", "values": "int"}, {}),
    (
        "map of nullable strings",
        {"type": "map", "values": ["null", "string"]},
        {"a": "1", "b": None, "": "", "caf\u00e9": "\U0001f600", "NULL": "NULL"},
    ),
    (
        "map of arrays of maps",
        {"type": "map", "values": {"type": "array", "items": {"type": "map", "values": "long"}}},
        {"k": [{"a": 1}, {}], "empty": []},
    ),
    ("map big", {"type": "map", "values": "int"}, {str(i): i for i in range(9000)}),
    # unions: fastavro's branch choice
    ("union null", ["null", "string"], None),
    ("union null last", ["string", "null"], None),
    ("union string", ["null", "string"], "x"),
    ("union bool", ["null", "int", "boolean"], True),
    ("union int before long", ["null", "int", "long"], 5),
    ("union int too big for int", ["null", "int", "long"], 2**40),
    ("union int into double", ["null", "double"], 3),
    ("union int before float", ["long", "float"], 3),
    ("union float before long", ["float", "long"], 3),
    ("union float then double", ["float", "double"], 1.1),
    ("union double then float", ["null", "double", "float"], 1.1),
    ("union float alone", ["null", "float"], 1.1),
    ("union bytes", ["null", "bytes"], b"x"),
    ("union bytearray", ["null", "bytes"], bytearray(b"x")),
    ("union enum first", [{"type": "enum", "name": "E", "symbols": ["a"]}, "string"], "a"),
    ("union enum miss", [{"type": "enum", "name": "E", "symbols": ["a"]}, "string"], "b"),
    ("union string first", ["string", {"type": "enum", "name": "E", "symbols": ["a"]}], "a"),
    ("union fixed", ["null", {"type": "fixed", "name": "F", "size": 2}, "bytes"], b"ab"),
    ("union fixed miss", ["null", {"type": "fixed", "name": "F", "size": 2}, "bytes"], b"abc"),
    (
        "union record before map",
        ["null", record(("a", ["null", "int"])), {"type": "map", "values": ["null", "int"]}],
        {"a": 1},
    ),
    (
        "union map before record",
        [{"type": "map", "values": ["null", "int"]}, record(("a", ["null", "int"]))],
        {"a": 1},
    ),
    (
        "union record with most fields",
        [record(("a", ["null", "int"]), name="R"), record(("a", "int"), ("b", "int"), name="S")],
        {"a": 1, "b": 2},
    ),
    ("union tuple notation", ["null", record(("a", "int"), name="R")], ("t.R", {"a": 1})),
    ("union tuple notation primitive", ["null", "string", "bytes"], ("bytes", b"x")),
    ("union tuple for array", {"type": "array", "items": "int"}, (1, 2)),
    ("union array", ["null", {"type": "array", "items": "int"}], [1, 2]),
    ("union array of unions", ["null", {"type": "array", "items": ["null", "int"]}], [None, 1]),
    ("union int subclass", ["null", "long"], type("MyInt", (int,), {})(7)),
    ("union str subclass", ["null", "string"], type("MyStr", (str,), {})("x")),
]


@pytest.mark.parametrize(("schema", "datum"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_matches_fastavro(schema, datum):
    check(schema, datum)


DECIMALS = [
    "0",
    "0.00",
    "-0",
    "-0.00",
    "1",
    "-1",
    "0.01",
    "-0.01",
    "1234.50",
    "-1234.50",
    "1234.5",
    "1234",
    "-99999999.99",
    "99999999.99",
    "1.27",
    "1.28",
    "-1.28",
    "-1.29",
    "327.67",
    "-327.68",
    "1E+3",
    "1.5E+3",
    "5E-2",
    "0E-2",
    "0E+5",
]


@pytest.mark.parametrize("text", DECIMALS)
def test_bytes_decimals(text):
    schema = dec(10, 2)
    check(schema, Decimal(text))
    check(["null", schema, "string"], Decimal(text))
    check(record(("v", ["null", schema, "string"])), {"v": Decimal(text)})


@pytest.mark.parametrize("text", [t for t in DECIMALS if t not in ("-0", "-0.00")])
def test_fixed_decimals(text):
    schema = dec(10, 2, "fixed", name="D", size=6)
    check(schema, Decimal(text))
    check(["null", schema], Decimal(text))


def test_union_record_chosen_by_dash_type():
    schema = [record(("a", ["null", "int"]), name="R"), record(("a", ["null", "int"]), name="S")]
    datum = {"-type": "t.S", "a": 1}
    assert compile_writer(schema)(datum) == fastavro_bytes(schema, datum) == b"\x02\x02\x02"


def test_fixed_decimal_negative_zero_is_written_as_zero():
    # fastavro writes Decimal("-0") in a fixed as -2 (units in the last place): a bug we do not copy
    schema = dec(9, 2, "fixed", name="D", size=4)
    assert compile_writer(schema)(Decimal("-0")) == bytes(4)
    assert compile_writer(schema)(Decimal("-0.00")) == bytes(4)


def test_scale_zero_and_other_scales():
    for precision, scale, texts in [
        (5, 0, ["0", "12345", "-99999", "1E+4", "-1E+2"]),
        (38, 10, ["1234567890123456789012345678.0123456789", "-0.0000000001", "1.5"]),
        (5, 5, ["0.00999", "-0.00001", "0.1"]),
        (19, 2, ["92233720368547758.07", "-92233720368547758.08"]),
    ]:
        for text in texts:
            check(dec(precision, scale), Decimal(text))
            check(["null", dec(precision, scale), "string"], Decimal(text))


def test_decimal_precision_1000_exactly():
    digits = "9" * 500 + "1234567890" * 50  # 1000 digits: far beyond any Decimal context
    for text in [digits[:500] + "." + digits[500:], "-" + digits[:500] + "." + digits[500:]]:
        value = Decimal(text)
        assert len(value.as_tuple().digits) == 1000
        check(dec(1000, 500), value)
        check(["null", dec(1000, 500), "string"], value)
        check(dec(1000, 500, "fixed", name="Big", size=416), value)
        expected = int(text.replace(".", ""))
        payload = compile_writer(dec(1000, 500))(value)
        assert int.from_bytes(payload[2:], "big", signed=True) == expected  # 2-byte length
    # fewer fraction digits than the scale: padded with zeros, exactly
    small = compile_writer(dec(1000, 500))(Decimal("-1.5"))
    assert int.from_bytes(small[2:], "big", signed=True) == -15 * 10**499
    # more than 4300 digits (beyond int()'s default limit for text)
    huge = Decimal("7" * 4500 + "." + "1" * 10)
    check(dec(5000, 10), huge)


def test_bytes_pass_through_decimal_schemas():
    check(dec(10, 2), b"\x01\x02")
    check(dec(4, 2, "fixed", name="D", size=2), b"\x01\x02")


def test_logical_types_with_ints():
    for logical, base, values in [
        ("timestamp-micros", "long", [0, -1, 1718000000123456, LONG_MAX, LONG_MIN]),
        ("timestamp-millis", "long", [0, -1, 1718000000123, LONG_MAX]),
        ("local-timestamp-micros", "long", [0, LONG_MIN, 1718000000123456]),
        ("local-timestamp-millis", "long", [0, 1718000000123]),
        ("time-micros", "long", [0, 86_400_000_000]),
        ("time-millis", "int", [0, 86_400_000]),
        ("date", "int", [0, -719163, INT_MAX, INT_MIN, 19723]),
        ("unknown-thing", "long", [5]),  # unknown logical types: the underlying type
    ]:
        schema = {"type": base, "logicalType": logical}
        for value in values:
            check(schema, value)
            check(["null", schema], value)


def test_logical_types_with_python_objects_convert_like_fastavro():
    aware = datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=timezone(timedelta(hours=-7)))
    before_epoch = datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
    naive = datetime(2024, 6, 1, 12, 0, 0, 123456)
    cases = [
        ({"type": "long", "logicalType": "timestamp-micros"}, [aware, before_epoch, naive]),
        ({"type": "long", "logicalType": "timestamp-millis"}, [aware, before_epoch, naive]),
        ({"type": "long", "logicalType": "local-timestamp-micros"}, [naive, aware]),
        ({"type": "long", "logicalType": "local-timestamp-millis"}, [naive, before_epoch]),
        ({"type": "int", "logicalType": "date"}, [date(2024, 2, 29), date(1, 1, 1), naive]),
        ({"type": "int", "logicalType": "date"}, ["2024-02-29"]),
        ({"type": "long", "logicalType": "time-micros"}, [time(13, 14, 15, 500000), time()]),
        ({"type": "int", "logicalType": "time-millis"}, [time(23, 59, 59, 999999)]),
        ({"type": "string", "logicalType": "uuid"}, [uuid.UUID(int=5), "not checked"]),
    ]
    for schema, values in cases:
        for value in values:
            assert compile_writer(schema)(value) == fastavro_bytes(schema, value)
            union = ["null", schema]
            assert compile_writer(union)(value) == fastavro_bytes(union, value)


def test_custom_attributes_are_ignored():
    schema = {
        "type": "record",
        "name": "t",
        "doc": "a table",
        "pg.table": "t",
        "fields": [
            {
                "name": "a",
                "type": {"type": "string", "pg.enum": ["x", "y"]},
                "pg.type": "mood",
                "pg.name": "A",
                "doc": "d",
                "aliases": ["b"],
            },
            {"name": "b", "type": ["null", "long"], "default": None, "pg.notnull": True},
        ],
    }
    check(schema, {"a": "not in pg.enum", "b": 5})


def test_defaults_and_missing_fields():
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "i", "type": "int", "default": 7},
            {"name": "s", "type": ["null", "string"], "default": None},
            {"name": "n", "type": ["null", "string"]},  # no default: fastavro writes null
            {"name": "d", "type": "double", "default": 1.5},
            {"name": "f", "type": "float", "default": "NaN"},  # float() of the default
            {"name": "a", "type": {"type": "array", "items": "int"}, "default": [1, 2]},
            {"name": "m", "type": {"type": "map", "values": "int"}, "default": {"k": 1}},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["x"]}, "default": "x"},
            {"name": "b", "type": "boolean", "default": False},
        ],
    }
    check(schema, {})
    check(schema, {"i": 1, "s": "x", "n": "y", "d": 2, "f": 3, "a": [], "m": {}, "b": True})
    check(schema, {"d": "Infinity"})  # fastavro calls float() on "float"/"double" fields


def test_mappings_that_are_not_dicts():
    from collections import OrderedDict, defaultdict

    schema = record(("a", ["null", "int"]), ("m", {"type": "map", "values": "int"}))
    check(schema, OrderedDict(a=1, m=OrderedDict(x=1)))
    check(schema, defaultdict(lambda: 5, m={}))  # a missing key is not defaultdict's default


# --------------------------------------------------------------------------- named types


def test_named_type_references_with_namespaces():
    schema = {
        "type": "record",
        "name": "Outer",
        "namespace": "com.example",
        "fields": [
            {"name": "a", "type": {"type": "fixed", "name": "Hash", "size": 2}},
            {"name": "b", "type": "Hash"},  # short name, enclosing namespace
            {"name": "c", "type": "com.example.Hash"},  # full name
            {
                "name": "d",
                "type": {
                    "type": "record",
                    "name": "Inner",
                    "namespace": "org.other",
                    "fields": [
                        {"name": "e", "type": {"type": "enum", "name": "Color", "symbols": ["R"]}},
                        {"name": "f", "type": ["null", "Color"]},  # org.other.Color
                        {"name": "g", "type": "com.example.Hash"},
                    ],
                },
            },
            {"name": "h", "type": ["null", "org.other.Inner"]},
            {"name": "i", "type": {"type": "array", "items": "org.other.Color"}},
            {"name": "j", "type": {"type": "record", "name": "x.y.Dotted", "fields": []}},
            {"name": "k", "type": "x.y.Dotted"},
        ],
    }
    inner = {"e": "R", "f": "R", "g": b"zz"}
    datum = {"a": b"aa", "b": b"bb", "c": b"cc", "d": inner, "h": inner, "i": ["R"], "j": {}}
    check(schema, datum | {"k": {}})
    check(schema, datum | {"h": None, "i": [], "k": {}})


def test_recursive_types():
    schema = {
        "type": "record",
        "name": "Node",
        "namespace": "list",
        "fields": [
            {"name": "value", "type": "long"},
            {"name": "next", "type": ["null", "Node"]},
            {"name": "children", "type": {"type": "array", "items": "list.Node"}},
            {"name": "index", "type": {"type": "map", "values": "Node"}},
        ],
    }
    leaf = {"value": -1, "next": None, "children": [], "index": {}}
    tree = {"value": 1, "next": leaf, "children": [leaf, leaf], "index": {"x": leaf}}
    chain = leaf
    for i in range(50):
        chain = {"value": i, "next": chain, "children": [], "index": {}}
    check(schema, tree)
    check(schema, chain)
    # a union where a dict may be the record or the map: fastavro's validation, recursively
    either = {"type": "array", "items": ["null", "Node", {"type": "map", "values": "long"}]}
    outer = record(("tree", schema), ("xs", either), name="Outer", namespace="list")
    check(outer, {"tree": tree, "xs": [tree, {"a": 1}, None, chain, {}]})


# --------------------------------------------------------------------------- PostgreSQL types


def T(name: str, kind: str = "b", category: str = "U", schema: str = "pg_catalog", **kw):
    return PgType(1000, name, schema, kind, category, **kw)


def arr(element: PgType) -> PgType:
    return PgType(1001, "_" + element.name, element.schema, "b", "A", element=element)


def rng(name: str, subtype: PgType, schema: str = "pg_catalog") -> PgType:
    return PgType(1002, name, schema, "r", "R", subtype=subtype)


def numeric_typmod(precision: int, scale: int) -> int:
    return ((precision << 16) | (scale & 0x7FF)) + 4


INT4, INT8, TEXT, NUMERIC = T("int4"), T("int8"), T("text"), T("numeric")
INTERVAL, TSTZ, DATE = T("interval"), T("timestamptz"), T("date")
INT4RANGE = rng("int4range", INT4)
MOOD = PgType(1, "mood", "public", "e", "E", labels=("sad", "ok", "it's"))
PRICE = PgType(2, "price", "public", "d", "N", base=NUMERIC, typmod=numeric_typmod(10, 2))
BIG = "9" * 500 + "." + "1234567890" * 50

# (column, texts PostgreSQL outputs for it under SESSION_SETTINGS)
PG_COLUMNS: list[tuple[Column, list[str]]] = [
    (Column("c_bool", T("bool")), ["t", "f"]),
    (Column("c_int2", T("int2")), ["-32768", "32767", "0"]),
    (Column("c_int4", INT4), ["2147483647", "-2147483648", "42", "-8193"]),
    (Column("c_int8", INT8), ["-9223372036854775808", "9223372036854775807", "123456"]),
    (Column("c_oid", T("oid")), ["4294967295", "0"]),
    (Column("c_xid", T("xid")), ["12345"]),
    (Column("c_cid", T("cid")), ["0"]),
    (Column("c_timetz", T("timetz")), ["12:34:56.789+05:30"]),
    (Column("c_float4", T("float4")), ["NaN", "Infinity", "-Infinity", "3.4028235e+38", "1.1"]),
    (Column("c_float4b", T("float4")), ["-0", "1e-45", "0.1"]),
    (Column("c_float8", T("float8")), ["0.1", "1.7976931348623157e+308", "5e-324", "-0", "NaN"]),
    (
        Column("c_num", NUMERIC, typmod=numeric_typmod(10, 2)),
        ["1234.50", "-99999999.99", "0.00", "NaN", "Infinity", "-Infinity", "0.01"],
    ),
    (
        Column("c_num_big", NUMERIC, typmod=numeric_typmod(38, 10)),
        ["1234567890123456789012345678.0123456789", "-0.0000000001"],
    ),
    (Column("c_num_neg", NUMERIC, typmod=numeric_typmod(5, -2)), ["12300", "-100", "0"]),
    (Column("c_num_tiny", NUMERIC, typmod=numeric_typmod(3, 5)), ["0.00999", "-0.00001"]),
    (Column("c_num_1000", NUMERIC, typmod=numeric_typmod(1000, 500)), [BIG, "-" + BIG, "1.5"]),
    (Column("c_num_free", NUMERIC), ["-3.14159265358979323846264338327950288", "NaN", "1e-40"]),
    (
        Column("c_money", T("money")),
        ["$1,234.56", "-$92,233,720,368,547,758.08", "$92,233,720,368,547,758.07", "($5.25)"],
    ),
    (Column("c_bytea", T("bytea")), ["\\x00ff5c27", "\\x", "\\x" + "ab" * 9000]),
    (Column("c_uuid", T("uuid")), ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
    (Column("c_date", DATE), ["2024-02-29", "0044-03-15 BC", "infinity", "-infinity"]),
    (Column("c_date2", DATE), ["5874897-12-31", "1970-01-01"]),
    (
        Column("c_ts", T("timestamp")),
        ["2024-06-01 12:00:00.123456", "0044-03-15 12:30:00.000001 BC", "infinity"],
    ),
    (
        Column("c_tstz", TSTZ),
        ["2024-06-01 19:00:00.123456+00", "-infinity", "275760-09-13 00:00:00+00"],
    ),
    (Column("c_time", T("time")), ["13:14:15.5", "24:00:00", "00:00:00.000001"]),
    (Column("c_interval", INTERVAL), ["P1Y2M3DT4H5M6.000007S", "PT-1S", "PT0S", "infinity"]),
    (Column("c_interval2", INTERVAL), ["-infinity", "P-1Y-2M3DT-4H-5M-6.789S"]),
    (Column("c_text", TEXT), ["hello", "", 'caf\u00e9 \U0001f600 {}\\"', "x" * 10000]),
    (Column("c_varchar", T("varchar")), ['a,b"c\\d']),
    (Column("c_json", T("json")), ['{"b": 1,   "a": [1, 2]}']),
    (Column("c_inet", T("inet")), ["192.168.0.1/24"]),
    (Column("c_mood", MOOD), ["sad", "it's"]),
    (Column("c_price", PRICE), ["12.30", "-0.01"]),
    (Column("c_pair", PgType(3, "pair", "public", "c", "C")), ['(1,"x, y")']),
    (Column("c_int_arr", arr(INT4), ndims=1), ["{1,NULL,-3}", "{}", "{NULL}"]),
    (
        Column("c_int_2d", arr(INT4), ndims=2),
        ["{{1,NULL,3},{NULL,5,6}}", "{}", "[0:1][1:2]={{1,2},{3,4}}"],
    ),
    (Column("c_int8_3d", arr(INT8), ndims=3), ["{{{1,2},{3,4}},{{5,NULL},{7,8}}}"]),
    (
        Column("c_text_arr", arr(TEXT), ndims=1),
        ['{"a,b","c\\"d","e\\\\f",NULL,"NULL",plain,"",caf\u00e9}', "{}"],
    ),
    (
        Column("c_num_arr", arr(NUMERIC), typmod=numeric_typmod(10, 2), ndims=1),
        ["{1.50,NULL,NaN,-99999999.99}"],
    ),
    (Column("c_date_arr", arr(DATE), ndims=1), ["{2020-02-29,NULL,infinity,-infinity}"]),
    (Column("c_tstz_arr", arr(TSTZ), ndims=1), ['{"2020-01-01 00:00:00.5+00",NULL,-infinity}']),
    (Column("c_interval_arr", arr(INTERVAL), ndims=1), ["{P1D,NULL,PT-1S,P1Y-2M}"]),
    (Column("c_box_arr", arr(T("box")), ndims=1), ["{(1,1),(0,0);(3,3),(2,2);NULL}"]),
    (Column("c_mood_arr", arr(MOOD), ndims=1), ['{sad,NULL,"it\'s"}']),
    (Column("c_range_arr", arr(INT4RANGE), ndims=1), ['{"[1,3)",empty,NULL,"(,5]"}']),
    (Column("c_int4range", INT4RANGE), ["[1,11)", "empty", "(,5]", "(,)"]),
    (Column("c_int8range", rng("int8range", INT8)), ["[-9223372036854775808,0)"]),
    (Column("c_numrange", rng("numrange", NUMERIC)), ["[-1.25,)", "[1,NaN]"]),
    (Column("c_daterange", rng("daterange", DATE)), ["[2020-01-01,infinity)"]),
    (
        Column("c_tsrange", rng("tsrange", T("timestamp"))),
        ['["2024-01-01 00:00:00","2024-01-02 00:00:00.5")', "[-infinity,infinity]"],
    ),
    (Column("c_floatrange", rng("floatrange", T("float8"), "My Schema")), ["[-Infinity,3.5]"]),
    (
        Column(
            "c_int4multi", PgType(4, "int4multirange", "pg_catalog", "m", "R", subtype=INT4RANGE)
        ),
        ["{[1,3),[5,7),[10,)}", "{}"],
    ),
    (
        Column("c_hstore", T("hstore", schema="public")),
        ['"a"=>"1", "b"=>NULL, "c \\"q\\""=>"x\\\\y", ""=>""', ""],
    ),
    (Column("Odd Name!", TEXT), ["sanitised field name"]),
]


def _rows(columns: list[Column], texts: list[list[str]]) -> list[list[str | None]]:
    """All NULL, then each text of each column alone, then rows with every column set."""
    n = len(columns)
    rows: list[list[str | None]] = [[None] * n]
    for i, column_texts in enumerate(texts):
        for text in column_texts:
            row: list[str | None] = [None] * n
            row[i] = text
            rows.append(row)
    for k in range(max(len(t) for t in texts)):
        rows.append([t[k % len(t)] for t in texts])
    return rows


@pytest.mark.parametrize(("column", "texts"), PG_COLUMNS, ids=[c.name for c, _ in PG_COLUMNS])
def test_every_postgres_type_alone(column, texts):
    key_schema, value_schema = record_schemas("public", "t", [column], [column.name])
    values, keys = row_encoder([column]), row_encoder([column], [column.name])
    write_value, write_key = compile_writer(value_schema), compile_writer(key_schema)
    for row in _rows([column], [texts]):
        check(value_schema, values(row), write_value)
        if row[0] is not None:
            check(key_schema, keys(row), write_key)


def test_all_postgres_types_in_one_table():
    # one record, where the named types (Interval, range records) are defined at their first use
    # and referenced by full name afterwards
    columns = [c for c, _ in PG_COLUMNS]
    texts = [t for _, t in PG_COLUMNS]
    keyed = ["c_int8", "c_text", "c_num", "c_interval", "c_int4range"]
    key_schema, value_schema = record_schemas("My Schema", "every type", columns, keyed)
    values, keys = row_encoder(columns), row_encoder(columns, keyed)
    write_value, write_key = compile_writer(value_schema), compile_writer(key_schema)
    for row in _rows(columns, texts):
        check(value_schema, values(row), write_value)
        if all(row[[c.name for c in columns].index(k)] is not None for k in keyed):
            check(key_schema, keys(row), write_key)


# --------------------------------------------------------------------------- generated data

PRIMITIVE_DATA = {
    "null": st.none(),
    "boolean": st.booleans(),
    "int": st.integers(INT_MIN, INT_MAX),
    "long": st.integers(LONG_MIN, LONG_MAX),
    "float": st.floats(width=32) | st.floats(),
    "double": st.floats() | st.integers(-(2**60), 2**60),
    "bytes": st.binary(max_size=20),
    "string": st.text(max_size=20),
}
NAME = st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True)


@st.composite
def decimals(draw, precision: int, scale: int):
    """Decimals that fit decimal(precision, scale), written with 0 to ``scale`` fraction digits."""
    fraction_digits = draw(st.integers(0, scale))
    limit = 10 ** (precision - scale + fraction_digits)
    coefficient = draw(st.integers(-limit + 1, limit - 1))
    return Decimal(f"{coefficient}E-{fraction_digits}")


@st.composite
def logical(draw):
    kind = draw(st.sampled_from(["decimal", "fixed-decimal", "micros", "date", "time", "uuid"]))
    if kind in ("decimal", "fixed-decimal"):
        precision = draw(st.integers(1, 40))
        scale = draw(st.integers(0, precision))
        if kind == "decimal":
            schema = dec(precision, scale)
        else:
            size = (precision * 3322 // 1000 + 2) // 8 + 1  # enough bytes for the digits
            schema = dec(precision, scale, "fixed", name="D", size=size)
        return schema, decimals(precision, scale)
    if kind == "micros":
        name = draw(st.sampled_from(["timestamp-micros", "local-timestamp-micros"]))
        aware = st.datetimes(timezones=st.just(UTC))
        return {"type": "long", "logicalType": name}, st.integers(LONG_MIN, LONG_MAX) | aware
    if kind == "date":
        return {"type": "int", "logicalType": "date"}, st.integers(INT_MIN, INT_MAX) | st.dates()
    if kind == "time":
        schema = {"type": "long", "logicalType": "time-micros"}
        return schema, st.integers(0, 86_400_000_000) | st.times()
    return {"type": "string", "logicalType": "uuid"}, st.uuids() | st.uuids().map(str)


def _kind(schema) -> str:
    if isinstance(schema, dict):
        return schema.get("name") or schema["type"]
    return "union" if isinstance(schema, list) else schema


@st.composite
def unions(draw, children):
    branches = draw(st.lists(children, min_size=1, max_size=4))
    chosen, kinds = [], set()
    for schema, data in branches:
        if isinstance(schema, list) or _kind(schema) in kinds:
            continue  # no union directly in a union, no type twice
        kinds.add(_kind(schema))
        chosen.append((schema, data))
    if (not chosen or draw(st.booleans())) and "null" not in kinds:
        chosen.insert(draw(st.integers(0, len(chosen))), ("null", st.none()))
    return [s for s, _ in chosen], st.one_of([d for _, d in chosen])


@st.composite
def records(draw, children):
    names = draw(st.lists(NAME, min_size=0, max_size=5, unique=True))
    fields, required, optional = [], {}, {}
    for name in names:
        schema, data = draw(children)
        field = {"name": name, "type": schema}
        if isinstance(schema, list) and schema[0] == "null" and draw(st.booleans()):
            field["default"] = None
            optional[name] = data
        else:
            required[name] = data
        fields.append(field)
    schema = {"type": "record", "name": "R", "fields": fields}
    return schema, st.fixed_dictionaries(required, optional=optional)


def containers(children):
    return st.one_of(
        children.map(lambda c: ({"type": "array", "items": c[0]}, st.lists(c[1], max_size=4))),
        children.map(
            lambda c: (
                {"type": "map", "values": c[0]},
                st.dictionaries(st.text(max_size=4), c[1], max_size=3),
            )
        ),
        unions(children),
        records(children),
    )


def enums_and_fixed():
    enum = st.lists(NAME, min_size=1, max_size=4, unique=True).map(
        lambda symbols: (
            {"type": "enum", "name": "E", "symbols": symbols},
            st.sampled_from(symbols),
        )
    )
    fixed = st.integers(0, 5).map(
        lambda n: ({"type": "fixed", "name": "F", "size": n}, st.binary(min_size=n, max_size=n))
    )
    return enum | fixed


SCHEMAS = st.recursive(
    st.sampled_from(sorted(PRIMITIVE_DATA.items())) | logical() | enums_and_fixed(),
    containers,
    max_leaves=8,
)


def _rename(schema, counter: list[int]):
    """Named types get distinct names (the strategies reuse R, E, F, D)."""
    if isinstance(schema, list):
        return [_rename(s, counter) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if "name" in out:
        counter[0] += 1
        out["name"] = f"{out['name']}{counter[0]}"
    if "fields" in out:
        out["fields"] = [f | {"type": _rename(f["type"], counter)} for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = _rename(out[key], counter)
    return out


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.data())
def test_generated_schemas_and_data_match_fastavro(data):
    schema, values = data.draw(SCHEMAS)
    schema = _rename(schema, [0])
    write = compile_writer(schema)
    for _ in range(3):
        datum = data.draw(values)
        try:
            expected = fastavro_bytes(schema, datum)
        except (ValueError, TypeError):
            # e.g. an enum symbol in [date, enum]: fastavro tries to parse it as an ISO date
            with pytest.raises((ValueError, TypeError)):
                write(datum)
            continue
        ours = write(datum)
        assert ours == expected
        buf = io.BytesIO(ours)
        fastavro.schemaless_reader(buf, fastavro.parse_schema(without_logical_types(schema)))
        assert buf.tell() == len(ours)


@settings(database=None)
@given(st.integers(LONG_MIN, LONG_MAX))
def test_every_long(n):
    assert compile_writer("long")(n) == fastavro_bytes("long", n)
    assert compile_writer(["null", "long"])(n) == fastavro_bytes(["null", "long"], n)


# --------------------------------------------------------------------------- errors


def test_int_out_of_range_names_the_field():
    schema = record(("outer", record(("n", "int"), ("m", "long"), name="inner")))
    write = compile_writer(schema)
    with pytest.raises(AvroValueError, match=r"field 'outer\.n'.*2147483648.*out of range"):
        write({"outer": {"n": 2**31, "m": 0}})
    with pytest.raises(ValueError, match=r"field 'outer\.n'.*out of range"):
        write({"outer": {"n": INT_MIN - 1, "m": 0}})
    with pytest.raises(ValueError, match=r"field 'outer\.m'.*out of range for Avro long"):
        write({"outer": {"n": 0, "m": 2**63}})
    with pytest.raises(ValueError, match=r"out of range for Avro long"):
        compile_writer(["null", "long"])(-(2**63) - 1)
    with pytest.raises(ValueError, match=r"out of range"):
        compile_writer("long")(2**64)


def test_missing_field_without_default():
    write = compile_writer(record(("a", "long"), ("b", record(("c", "string"), name="inner"))))
    with pytest.raises(AvroValueError, match=r"field 'a': missing.*no default"):
        write({"b": {"c": "x"}})
    with pytest.raises(ValueError, match=r"field 'b\.c': missing"):
        write({"a": 1, "b": {}})


def test_wrong_types_for_non_union_fields():
    write = compile_writer(
        record(
            ("s", "string"),
            ("n", "long"),
            ("b", "boolean"),
            ("x", "bytes"),
            ("r", record(("a", "int"), name="inner")),
            ("l", {"type": "array", "items": "int"}),
            ("m", {"type": "map", "values": "int"}),
        )
    )
    good = {"s": "x", "n": 1, "b": True, "x": b"", "r": {"a": 1}, "l": [], "m": {}}
    write(good)
    for field, bad in [
        ("s", 5),
        ("s", b"bytes"),
        ("n", "5"),
        ("n", 5.0),
        ("n", 1e20),
        ("n", None),
        ("b", None),
        ("b", 1),
        ("x", "text"),
        ("r", "not a record"),
        ("l", "abc"),
        ("l", None),
        ("m", ["k", 1]),
    ]:
        with pytest.raises(AvroTypeError, match=rf"field '{field}'") as info:
            write(good | {field: bad})
        assert isinstance(info.value, TypeError)
    with pytest.raises(TypeError, match=r"field 'm\[1\]': map keys must be str"):
        write(good | {"m": {1: 1}})


def test_errors_inside_arrays_and_maps_name_the_item():
    write = compile_writer(
        record(
            ("xs", {"type": "array", "items": record(("v", "int"), name="item")}),
            ("m", {"type": "map", "values": {"type": "array", "items": "long"}}),
        )
    )
    with pytest.raises(AvroValueError, match=r"field 'xs\[2\]\.v'.*out of range"):
        write({"xs": [{"v": 1}, {"v": 2}, {"v": 2**40}], "m": {}})
    with pytest.raises(AvroTypeError, match=r"field \"m\['k'\]\[1\]\""):
        write({"xs": [], "m": {"k": [1, "two"]}})


def test_decimal_errors():
    write = compile_writer(record(("p", ["null", dec(10, 2), "string"])))
    with pytest.raises(AvroValueError, match=r"field 'p'.*1\.234.*2 fraction digits"):
        write({"p": Decimal("1.234")})
    with pytest.raises(ValueError, match=r"field 'p'.*10 digits"):
        write({"p": Decimal("123456789.01")})
    with pytest.raises(ValueError, match=r"field 'p'.*NaN"):
        write({"p": Decimal("NaN")})
    assert write({"p": "NaN"}) == fastavro_bytes(
        record(("p", ["null", dec(10, 2), "string"])), {"p": "NaN"}
    )
    with pytest.raises(ValueError, match=r"does not fit"):
        # 1 digit as written passes the precision check, but 900000 needs 3 bytes
        compile_writer(dec(4, 2, "fixed", name="D", size=2))(Decimal("9E+3"))


def test_union_without_a_matching_branch():
    write = compile_writer(record(("u", ["null", "long", "string"])))
    with pytest.raises(AvroValueError, match=r"field 'u': no branch of \[null, long, string\]"):
        write({"u": 1.5})
    with pytest.raises(ValueError, match=r"field 'u'.*no branch"):
        write({"u": True})  # fastavro does not take a bool for a long in a union either
    with pytest.raises(ValueError, match=r"union type name 'bytes' is not a branch"):
        write({"u": ("bytes", b"x")})


def test_enum_and_fixed_errors():
    write = compile_writer(
        record(
            ("e", {"type": "enum", "name": "E", "symbols": ["a", "b"]}),
            ("f", {"type": "fixed", "name": "F", "size": 2}),
        )
    )
    with pytest.raises(AvroValueError, match=r"field 'e': 'c' is not a symbol of enum t\.E"):
        write({"e": "c", "f": b"ab"})
    with pytest.raises(AvroValueError, match=r"field 'f': 3 bytes for a fixed of size 2"):
        write({"e": "a", "f": b"abc"})


def test_top_level_errors_are_clear_too():
    with pytest.raises(AvroTypeError, match="expected a dict for record t.r"):
        compile_writer(record(("a", "int")))(None)
    with pytest.raises(AvroTypeError, match="expected long, got str .x."):
        compile_writer("long")("x")


# --------------------------------------------------------------------------- API


def test_prefix_comes_first():
    schema = record(("id", "long"))
    write = compile_writer(schema, prefix=b"\x00\x00\x00\x00\x07")
    assert write({"id": 5}) == b"\x00\x00\x00\x00\x07" + fastavro_bytes(schema, {"id": 5})


def test_serde_encoder_writes_confluent_wire_format():
    schema = record(("id", "long"))
    encoded = AvroEncoder(7, schema).encode({"id": 5})
    assert struct.unpack(">bI", encoded[:5]) == (0, 7)
    assert split(encoded) == (7, memoryview(fastavro_bytes(schema, {"id": 5})))


def test_schema_forms():
    assert compile_writer("long")(1) == b"\x02"
    assert compile_writer('{"type": "array", "items": "int"}')([1]) == b"\x02\x02\x00"
    assert compile_writer(["null", "int"])(None) == b"\x00"
    parsed = fastavro.parse_schema(record(("a", "int")))  # an already parsed schema works too
    assert compile_writer(parsed)({"a": 1}) == b"\x02"
    with pytest.raises(fastavro.schema.UnknownType):
        compile_writer(record(("a", "Nope")))


def test_the_writer_is_reusable_and_does_not_mutate_its_input():
    schema = record(("a", ["null", "long"]), ("b", {"type": "array", "items": "string"}))
    before = copy.deepcopy(schema)
    write = compile_writer(schema)
    assert schema == before
    datum = {"b": ("x", "y")}
    first = write(datum)
    assert write(datum) == first and datum == {"b": ("x", "y")}
