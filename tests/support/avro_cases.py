"""The Avro writer's cases, shared by its tests and the reader's (tests/test_avro_writer.py,
tests/test_avro_reader.py): schemas with data that fastavro writes, a column of every PostgreSQL
type with its texts, and generated schemas with data (hypothesis)."""

from __future__ import annotations

import math
from datetime import UTC
from decimal import Decimal

from hypothesis import strategies as st

from schemas.pgtypes import Column, PgType

LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


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
