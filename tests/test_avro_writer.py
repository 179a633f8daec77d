"""schemas/avro_writer: compiled Avro encoders, byte for byte what fastavro writes."""

from __future__ import annotations

import copy
import io
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
from schemas.serde import AvroEncoder, split
from tests.support.avro_cases import (
    CASES,
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    PG_COLUMNS,
    SCHEMAS,
    _rename,
    _rows,
    dec,
    record,
)


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
