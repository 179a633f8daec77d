"""End to end against a real PostgreSQL: every mapped type, tricky values, read as text under
SESSION_SETTINGS, described by capture/source/typecatalog.py, converted by the codecs, written and
read back with fastavro, and compared with values computed independently (psycopg's binary
protocol, or PostgreSQL's own arithmetic)."""

from __future__ import annotations

import io
import json
import math
import uuid
from decimal import Decimal

import fastavro
import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.string import TextLoader

from capture.source.typecatalog import load_columns, load_type
from schemas.avro_schema import (
    record_schemas,
    row_encoder,
    row_writer,
    without_logical_types,
)
from schemas.pgtypes import (
    SESSION_SETTINGS,
    Column,
    TypeConversionError,
    codec_for,
    session_statements,
)

pytestmark = pytest.mark.stack

INT_MAX, INT_MIN = 2**31 - 1, -(2**31)
LONG_MAX, LONG_MIN = 2**63 - 1, -(2**63)


def days_sql(x: str) -> str:
    """PostgreSQL computing the Avro date (days since 1970-01-01) of the date expression x."""
    return (
        f"case when {x} = 'infinity'::date then {INT_MAX} "
        f"when {x} = '-infinity'::date then ({INT_MIN + 1} - 1) "
        f"else {x} - date '1970-01-01' end"
    )


def micros_sql(x: str) -> str:
    """PostgreSQL computing micros since 1970 (UTC) of a timestamp(tz) expression x."""
    return (
        f"case when not isfinite({x}) and {x} > '2000-01-01' then {LONG_MAX} "
        f"when not isfinite({x}) then ({LONG_MIN + 1}::int8 - 1) "
        f"else (extract(epoch from {x}) * 1000000)::int8 end"
    )


def interval_sql(x: str) -> str:
    """PostgreSQL computing the Interval record of an interval expression x, as JSON."""
    return (
        f"case when {x} is null then null else json_build_object("
        f"'months', (extract(year from {x}) * 12 + extract(month from {x}))::int, "
        f"'days', extract(day from {x})::int, "
        f"'microseconds', ((extract(hour from {x}) * 3600 + extract(minute from {x}) * 60 "
        f"+ extract(second from {x})) * 1000000)::int8) end"
    )


def range_sql(x: str, bound) -> str:
    """PostgreSQL describing the range expression x as the range record, as JSON."""
    return (
        f"case when {x} is null then null else json_build_object("
        f"'empty', isempty({x}), "
        f"'lower', case when lower_inf({x}) then null else {bound(f'lower({x})')} end, "
        f"'upper', case when upper_inf({x}) then null else {bound(f'upper({x})')} end, "
        f"'lower_inclusive', lower_inc({x}), 'upper_inclusive', upper_inc({x})) end"
    )


def array_json_sql(x: str, element) -> str:
    """A 1-dimensional array expression x as a JSON array of element(v) (nulls kept)."""
    return (
        f"case when {x} is null then null else coalesce((select json_agg("
        f"case when v is null then null else {element('v')} end order by o) "
        f"from unnest({x}) with ordinality as u(v, o)), '[]'::json) end"
    )


def shaped_sql(x: str, ndims: int) -> str:
    """An array expression x as the capture publishes it in a column of ``ndims`` declared
    dimensions: nested JSON arrays when it has that shape (all lower bounds 1, or empty), else
    the general array record (each dimension's lower bound and length, flat elements)."""
    declared = " and ".join(
        [f"array_ndims({x}) = {ndims}"]
        + [f"array_lower({x}, {d}) = 1" for d in range(1, ndims + 1)])
    return (
        f"case when {x} is null then null when cardinality({x}) = 0 or ({declared}) "
        f"then to_json({x}) else json_build_object("
        f"'dimensions', (select json_agg(json_build_object('lower', array_lower({x}, d), "
        f"'length', array_length({x}, d)) order by d) "
        f"from generate_series(1, array_ndims({x})) d), "
        f"'elements', (select json_agg(v order by o) from unnest({x}) with ordinality u(v, o))) end"
    )


def ident(x: str) -> str:
    return x


def as_text(x: str) -> str:
    return f"{x}::text"


def avro_decimal_or_special(value):
    if value is None:
        return None
    return value if value.is_finite() else str(value)


def finite_or_text(value):
    """Our unconstrained-numeric strings compared through Decimal (exact), specials as text."""
    return None if value is None else (str(value) if not value.is_finite() else value)


# column name → (SQL type, reference SQL on the column {c}, reference mode, to-expected)
# mode "b": binary psycopg result; "t": text result (JSON decoded by psycopg); "r": the raw
# text output (for the types mapped to it, the mapping is exactly that text).
COLUMNS: dict[str, tuple[str, str, str, object]] = {
    "c_bool": ("bool", "{c}", "b", None),
    "c_int2": ("int2", "{c}", "b", None),
    "c_int4": ("int4", "{c}", "b", None),
    "c_int8": ("int8", "{c}", "b", None),
    "c_oid": ("oid", "{c}", "b", None),
    "c_float4": ("float4", "{c}", "b", None),  # binary: the exact float32
    "c_float8": ("float8", "{c}", "b", None),
    "c_num": ("numeric(10,2)", "{c}", "b", avro_decimal_or_special),
    "c_num_big": ("numeric(38,10)", "{c}", "b", avro_decimal_or_special),
    "c_num_neg": ("numeric(5,-2)", "{c}", "b", avro_decimal_or_special),
    "c_num_tiny": ("numeric(3,5)", "{c}", "b", avro_decimal_or_special),
    "c_num_free": ("numeric", "{c}", "b", finite_or_text),
    "c_money": ("money", "{c}::numeric", "b", None),
    "c_text": ("text", "{c}", "b", None),
    "c_varchar": ("varchar(10)", "{c}", "b", None),
    "c_bpchar": ("char(5)", "{c}", "b", None),
    "c_name": ("name", "{c}", "r", None),
    "c_char": ('"char"', "{c}", "r", None),
    "c_citext": ("{ext_citext}.citext", "{c}", "r", None),
    "c_xml": ("xml", "{c}", "r", None),
    "c_json": ("json", "{c}", "r", None),
    "c_jsonb": ("jsonb", "{c}", "r", None),
    "c_tsvector": ("tsvector", "{c}", "r", None),
    "c_tsquery": ("tsquery", "{c}", "r", None),
    "c_inet": ("inet", "{c}", "r", None),
    "c_cidr": ("cidr", "{c}", "r", None),
    "c_macaddr": ("macaddr", "{c}", "r", None),
    "c_macaddr8": ("macaddr8", "{c}", "r", None),
    "c_bit": ("bit(4)", "{c}", "r", None),
    "c_varbit": ("varbit", "{c}", "r", None),
    "c_lsn": ("pg_lsn", "{c}", "r", None),
    "c_point": ("point", "{c}", "r", None),
    "c_line": ("line", "{c}", "r", None),
    "c_lseg": ("lseg", "{c}", "r", None),
    "c_box": ("box", "{c}", "r", None),
    "c_path": ("path", "{c}", "r", None),
    "c_polygon": ("polygon", "{c}", "r", None),
    "c_circle": ("circle", "{c}", "r", None),
    "c_timetz": ("timetz", "{c}", "r", None),
    "c_pair": ("{s}.pair", "{c}", "r", None),
    "c_ltree": ("{ext_ltree}.ltree", "{c}", "r", None),
    "c_bytea": ("bytea", "{c}", "b", None),
    "c_uuid": ("uuid", "{c}", "b", lambda v: None if v is None else str(v)),
    "c_date": ("date", days_sql("{c}"), "b", None),
    "c_ts": ("timestamp", micros_sql("{c}"), "b", None),
    "c_tstz": ("timestamptz", micros_sql("{c}"), "b", None),
    "c_time": ("time", "(extract(epoch from {c}) * 1000000)::int8", "b", None),
    "c_interval": ("interval", interval_sql("{c}"), "t", None),
    "c_interval2": ("interval", interval_sql("{c}"), "t", None),
    "c_int_2d": ("int4[][]", "{c}", "b", None),
    "c_int_3d": ("int8[][][]", "{c}", "b", None),
    "c_text_arr": ("text[]", "{c}", "b", None),
    "c_box_arr": ("box[]", array_json_sql("{c}", as_text), "t", None),
    "c_num_arr": (
        "numeric(10,2)[]",
        "{c}",
        "b",
        lambda v: None if v is None else [avro_decimal_or_special(x) for x in v],
    ),
    "c_date_arr": ("date[]", array_json_sql("{c}", days_sql), "t", None),
    "c_ts_arr": ("timestamptz[]", array_json_sql("{c}", micros_sql), "t", None),
    "c_interval_arr": ("interval[]", array_json_sql("{c}", interval_sql), "t", None),
    "c_mood_arr": ("{s}.mood[]", array_json_sql("{c}", as_text), "t", None),
    "c_range_arr": (
        "int4range[]",
        array_json_sql("{c}", lambda v: range_sql(v, ident)),
        "t",
        None,
    ),
    "c_lb_arr": ("int4[]", shaped_sql("{c}", 1), "t", None),
    "c_dims_arr": ("int4[]", shaped_sql("{c}", 1), "t", None),
    "c_dims_2d": ("int4[][]", shaped_sql("{c}", 2), "t", None),
    "c_mood": ("{s}.mood", "{c}", "r", None),
    "c_price": ("{s}.price", "{c}::numeric", "b", avro_decimal_or_special),
    "c_short": ("{s}.shorttext", "{c}", "r", None),
    "c_matrix": ("{s}.intmatrix", "{c}::int4[]", "b", None),
    "c_int4range": ("int4range", range_sql("{c}", ident), "t", None),
    "c_int8range": ("int8range", range_sql("{c}", as_text), "t", None),
    "c_numrange": ("numrange", range_sql("{c}", as_text), "t", None),
    "c_daterange": ("daterange", range_sql("{c}", days_sql), "t", None),
    "c_tsrange": ("tsrange", range_sql("{c}", micros_sql), "t", None),
    "c_tstzrange": ("tstzrange", range_sql("{c}", micros_sql), "t", None),
    "c_floatrange": ("{s}.floatrange", range_sql("{c}", as_text), "t", None),
    "c_textrange": ("{s}.textrange", range_sql("{c}", ident), "t", None),
    "c_int4multi": (
        "int4multirange",
        array_json_sql("{c}", lambda v: range_sql(v, ident)),
        "t",
        None,
    ),
    "c_datemulti": (
        "datemultirange",
        array_json_sql("{c}", lambda v: range_sql(v, days_sql)),
        "t",
        None,
    ),
    "c_hstore": (
        "{ext_hstore}.hstore",
        "case when {c} is null then null else "
        "coalesce((select json_object_agg(key, value) from each({c})), '{{}}'::json) end",
        "t",
        None,
    ),
}

# Bounds of ranges of int8 and float8 come back as text from the reference query (JSON cannot
# carry int8 or float8 exactly); they are converted here.
BOUND_CONVERTERS = {"c_int8range": int, "c_floatrange": float}

ROWS: list[dict[str, str]] = [
    {  # edge values
        "c_bool": "true",
        "c_int2": "-32768",
        "c_int4": "2147483647",
        "c_int8": "-9223372036854775808",
        "c_oid": "4294967295",
        "c_float4": "'NaN'",
        "c_float8": "'-Infinity'",
        "c_num": "'NaN'",
        "c_num_big": "'1234567890123456789012345678.0123456789'",
        "c_num_neg": "12345",
        "c_num_tiny": "0.00999",
        "c_num_free": "'Infinity'",
        "c_money": "'-92233720368547758.08'",
        "c_text": "E'tab\\there \"quotes\" back\\\\slash\\nnewline, comma, caf\\u00e9 {}'",
        "c_varchar": "'a,b\"c\\d'",
        "c_bpchar": "'ab'",
        "c_name": "'some name'",
        "c_char": "'x'",
        "c_citext": "'MiXeD'",
        "c_xml": "'<a b=\"1\">x &amp; y</a>'",
        "c_json": '\'{"b": 1,   "a": [1, 2]}\'',
        "c_jsonb": '\'{"b": 1, "a": [1, 2.50], "c": null}\'',
        "c_tsvector": "'a fat cat sat'",
        "c_tsquery": "'fat & (rat | cat)'",
        "c_inet": "'192.168.0.1/24'",
        "c_cidr": "'10.0.0.0/8'",
        "c_macaddr": "'08:00:2b:01:02:03'",
        "c_macaddr8": "'08:00:2b:01:02:03:04:05'",
        "c_bit": "B'1010'",
        "c_varbit": "B'101'",
        "c_lsn": "'16/B374D848'",
        "c_point": "'(1.5,-2)'",
        "c_line": "'{1,2,3}'",
        "c_lseg": "'[(0,0),(1,1)]'",
        "c_box": "'(1,1),(0,0)'",
        "c_path": "'[(0,0),(1,1),(2,0)]'",
        "c_polygon": "'((0,0),(1,1),(1,0))'",
        "c_circle": "'<(0,0),5>'",
        "c_timetz": "'12:34:56.789+05:30'",
        "c_pair": "row(1, 'x, \"y\" \\ z')",
        "c_ltree": "'a.b.c'",
        "c_bytea": "'\\x00ff5c27'::bytea",
        "c_uuid": "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
        "c_date": "'0044-03-15 BC'",
        "c_ts": "'0044-03-15 12:30:00.000001 BC'",
        "c_tstz": "'infinity'",
        "c_time": "'24:00:00'",
        "c_interval": "'-1 year +2 months -3 days +04:05:06.789'",
        "c_interval2": "'-1 microsecond'",
        "c_int_2d": "'{{1,NULL,3},{NULL,5,6}}'",
        "c_int_3d": "'{{{1,2},{3,4}},{{5,NULL},{-9223372036854775808,9223372036854775807}}}'",
        "c_text_arr": (
            "array['a,b', 'c\"d', 'e\\f', 'NULL', 'null', '', ' lead', 'trail ', '{braces}',"
            " NULL, 'caf\u00e9', 'semi;colon', E'new\\nline']"
        ),
        "c_box_arr": "'{(1,1),(0,0);(3,3),(2,2);NULL}'",
        "c_num_arr": "'{1.50,NULL,NaN,-99999999.99}'",
        "c_date_arr": "'{2020-02-29,NULL,0001-01-01 BC,infinity,-infinity,10000-01-01}'",
        "c_ts_arr": "array['2020-01-01 00:00:00.5+00', NULL, '-infinity']::timestamptz[]",
        "c_interval_arr": "'{P1D,NULL,PT-1S,P1Y-2M}'",
        "c_mood_arr": "array['sad', NULL, 'it''s \"quoted\", really']::{s}.mood[]",
        "c_range_arr": '\'{"[1,3)",empty,NULL,"(,5]"}\'',
        "c_lb_arr": "'[0:2]={1,2,3}'",
        "c_dims_arr": "'{{1,NULL},{3,4}}'",
        "c_dims_2d": "'{1,2}'",
        "c_mood": "'it''s \"quoted\", really'",
        "c_price": "12.3",
        "c_short": "'x y'",
        "c_matrix": "'{{1,2},{3,NULL}}'",
        "c_int4range": "'[1,10]'",
        "c_int8range": "'(,5]'",
        "c_numrange": "'[-1.25,)'",
        "c_daterange": "'[-infinity,2020-01-01)'",
        "c_tsrange": '\'["0044-03-15 12:00:00 BC","2020-01-01 00:00:00.5")\'',
        "c_tstzrange": "'empty'",
        "c_floatrange": "'[-Infinity,3.5]'",
        "c_textrange": '\'["","a""b\\\\c, (d)"]\'',
        "c_int4multi": "'{[1,3),[5,7),[10,)}'",
        "c_datemulti": "'{[2020-01-01,2020-02-01),[2021-01-01,infinity)}'",
        "c_hstore": (
            '\'"a"=>"1", "b"=>NULL, "c \\"q\\""=>"x\\\\y", "NULL"=>"NULL", ""=>"", "k=>v"=>"a, b"\''
        ),
    },
    {  # other edges and ordinary values
        "c_bool": "false",
        "c_int2": "32767",
        "c_int4": "-2147483648",
        "c_int8": "9223372036854775807",
        "c_oid": "0",
        "c_float4": "1.1",
        "c_float8": "0.1",
        "c_num": "-12345678.90",
        "c_num_big": "'-0.0000000001'",
        "c_num_neg": "-50",
        "c_num_tiny": "-0.00001",
        "c_num_free": (
            "'-3.14159265358979323846264338327950288419716939937510"
            "58209749445923078164062862089986280348253421170679'"
        ),
        "c_money": "'92233720368547758.07'",
        "c_text": "''",
        "c_varchar": "''",
        "c_bpchar": "'abcde'",
        "c_name": "''",
        "c_char": "''",
        "c_citext": "'x'",
        "c_xml": "'plain'",
        "c_json": "'[]'",
        "c_jsonb": "'\"\\u00e9\"'",
        "c_tsvector": "''",
        "c_tsquery": "'x'",
        "c_inet": "'::1'",
        "c_cidr": "'2001:db8::/32'",
        "c_macaddr": "'ff:ff:ff:ff:ff:ff'",
        "c_macaddr8": "'00:00:00:00:00:00:00:00'",
        "c_bit": "B'0000'",
        "c_varbit": "B''",
        "c_lsn": "'0/0'",
        "c_point": "'(0,0)'",
        "c_line": "'{0,-1,0}'",
        "c_lseg": "'[(0,0),(0,0)]'",
        "c_box": "'(0,0),(0,0)'",
        "c_path": "'((0,0),(1,1))'",
        "c_polygon": "'((0,0))'",
        "c_circle": "'<(1,1),0>'",
        "c_timetz": "'00:00:00-12'",
        "c_pair": "row(NULL, '')",
        "c_ltree": "''",
        "c_bytea": "''::bytea",
        "c_uuid": "'00000000-0000-0000-0000-000000000000'",
        "c_date": "'5874897-12-31'",
        "c_ts": "'275760-09-13 00:00:00'",
        "c_tstz": "'-infinity'",
        "c_time": "'00:00:00.000001'",
        "c_interval": "'0'",
        "c_interval2": "'1 year 2 mons 3 days 04:05:06.789'",
        "c_int_2d": "'{}'",
        "c_int_3d": "'{}'",
        "c_text_arr": "'{}'",
        "c_box_arr": "'{}'",
        "c_num_arr": "'{}'",
        "c_date_arr": "'{}'",
        "c_ts_arr": "'{}'",
        "c_interval_arr": "'{}'",
        "c_mood_arr": "'{}'",
        "c_range_arr": "'{}'",
        "c_lb_arr": "'[-3:-3]={NULL}'",
        "c_dims_arr": "'[2:3][0:0]={{5},{6}}'",
        "c_dims_2d": "'[0:0][1:1][2:2]={{{7}}}'",
        "c_mood": "'sad'",
        "c_price": "0",
        "c_short": "''",
        "c_matrix": "'{}'",
        "c_int4range": "'empty'",
        "c_int8range": "'[-9223372036854775808,9223372036854775807)'",
        "c_numrange": "'(,)'",
        "c_daterange": "'[0044-03-15 BC,10000-01-01]'",
        "c_tsrange": "'(,infinity]'",
        "c_tstzrange": "'[2020-01-01 00:00:00-08,infinity]'",
        "c_floatrange": "'(1e-300,1e300)'",
        "c_textrange": "'(,\" \")'",
        "c_int4multi": "'{}'",
        "c_datemulti": "'{[-infinity,infinity]}'",
        "c_hstore": "''",
    },
    {},  # every column NULL
    {  # today's ordinary values
        "c_bool": "true",
        "c_int4": "42",
        "c_float4": "3.4028235e38",
        "c_float8": "1.7976931348623157e308",
        "c_num": "99999999.99",
        "c_num_free": "'1e-40'",
        "c_money": "'$1,234.56'",
        "c_text": "'hello'",
        "c_date": "'2024-02-29'",
        "c_ts": "'2024-06-01 12:00:00.123456'",
        "c_tstz": "'2024-06-01 12:00:00.123456-07'",
        "c_time": "'13:14:15.5'",
        "c_interval": "'P1Y2M3DT4H5M6.000007S'",
        "c_interval2": "'-1 hour'",
        "c_int_2d": "'{{1}}'",
        "c_int_3d": "'{{{7}}}'",
        "c_dims_arr": "'{7,NULL}'",
        "c_dims_2d": "'{{1,2}}'",
        "c_text_arr": "'{a,b}'",
        "c_tsrange": "'[2024-01-01 00:00:00,2024-01-02 00:00:00)'",
        "c_tstzrange": "'[2024-01-01 00:00:00+00,2024-01-02 00:00:00+05:30)'",
        "c_hstore": '\'"k"=>"v"\'',
    },
]

LITERAL_TEXTS = {  # what the text output must be, checked as such (string mappings)
    (0, "c_bpchar"): "ab   ",
    (0, "c_json"): '{"b": 1,   "a": [1, 2]}',
    (0, "c_text"): 'tab\there "quotes" back\\slash\nnewline, comma, caf\u00e9 {}',
    (0, "c_mood"): 'it\'s "quoted", really',
    (0, "c_pair"): '(1,"x, ""y"" \\\\ z")',
    (1, "c_bpchar"): "abcde",
    (0, "c_text_arr"): [
        "a,b",
        'c"d',
        "e\\f",
        "NULL",
        "null",
        "",
        " lead",
        "trail ",
        "{braces}",
        None,
        "caf\u00e9",
        "semi;colon",
        "new\nline",
    ],
    (0, "c_hstore"): {
        "a": "1",
        "b": None,
        'c "q"': "x\\y",
        "NULL": "NULL",
        "": "",
        "k=>v": "a, b",
    },
}


def _sub(text: str, names: dict[str, str]) -> str:
    for key, value in names.items():
        text = text.replace("{" + key + "}", value)
    return text


def _ext_schema(conn: psycopg.Connection, name: str) -> str:
    conn.execute(f"create extension if not exists {name}")
    return conn.execute(
        "select n.nspname from pg_extension e join pg_namespace n on n.oid = e.extnamespace "
        "where e.extname = %s",
        (name,),
    ).fetchone()[0]


@pytest.fixture(scope="module")
def pg(stack):
    """(connection under SESSION_SETTINGS, schema name, table oid) with the table filled."""
    schema = f"types_{uuid.uuid4().hex[:12]}"
    conn = psycopg.connect(stack.pg_dsn, autocommit=True)
    try:
        for statement in session_statements():
            conn.execute(statement)
        names = {
            "s": schema,
            "ext_hstore": _ext_schema(conn, "hstore"),
            "ext_citext": _ext_schema(conn, "citext"),
            "ext_ltree": _ext_schema(conn, "ltree"),
        }
        conn.execute(f"create schema {schema}")
        conn.execute(
            f"create type {schema}.mood as enum ('sad', 'ok', 'happy', 'it''s \"quoted\", really')"
        )
        conn.execute(f"create domain {schema}.price as numeric(10,2) check (value >= 0)")
        conn.execute(f"create domain {schema}.shorttext as varchar(20)")
        conn.execute(f"create domain {schema}.intmatrix as int4[][]")
        conn.execute(f"create type {schema}.floatrange as range (subtype = float8)")
        conn.execute(f'create type {schema}.textrange as range (subtype = text, collation = "C")')
        conn.execute(f"create type {schema}.pair as (a int, b text)")
        coldefs = ", ".join(f"{n} {_sub(t, names)}" for n, (t, *_rest) in COLUMNS.items())
        conn.execute(f"create table {schema}.everything (id int8 primary key, {coldefs})")
        for i, row in enumerate(ROWS):
            cols = ["id", *row]
            vals = [str(i), *(_sub(v, names) for v in row.values())]
            conn.execute(
                f"insert into {schema}.everything ({', '.join(cols)}) values ({', '.join(vals)})"
            )
        relid = conn.execute(f"select '{schema}.everything'::regclass::oid").fetchone()[0]
        yield conn, schema, relid
    finally:
        conn.execute(f"drop schema if exists {schema} cascade")
        conn.close()


def _texts(conn, schema, columns):
    """The rows as the types' text output (what pgoutput and COPY send): every column loaded
    as raw text. (A ``::text`` cast is not the same: bool gives "true", bpchar loses padding.)"""
    with conn.cursor() as cur:
        for column in columns:
            pgtype = column.type
            while pgtype is not None:  # a domain column is described with its base type
                cur.adapters.register_loader(pgtype.oid, TextLoader)
                pgtype = pgtype.base
        names = ", ".join(c.name for c in columns)
        cur.execute(f"select {names} from {schema}.everything order by id")
        return cur.fetchall()


def _references(conn, schema):
    """column → list (per row) of the independently computed expected Avro value."""
    out: dict[str, list] = {}
    for name, (_type, ref, mode, convert) in COLUMNS.items():
        expr = ref.format(c=name)
        with conn.cursor(binary=(mode == "b")) as cur:
            if mode == "r":
                for oid in conn.execute(
                    f"select pg_typeof({expr})::oid, "
                    f"coalesce(nullif(t.typbasetype, 0), t.oid) from "
                    f"{schema}.everything, pg_type t "
                    f"where t.oid = pg_typeof({expr}) limit 1"
                ).fetchone():
                    cur.adapters.register_loader(oid, TextLoader)
            cur.execute(f"select {expr} from {schema}.everything order by id")
            values = [r[0] for r in cur.fetchall()]
        if convert is not None:
            values = [convert(v) for v in values]
        bound = BOUND_CONVERTERS.get(name)
        if bound is not None:
            for v in values:
                if v:
                    for side in ("lower", "upper"):
                        if v[side] is not None:
                            v[side] = bound(v[side])
        out[name] = values
    return out


def _same(a, b) -> bool:
    """Equality, recursively, with NaN equal to NaN, and strict about bool and str types
    (numbers compare by value: an int read from Avro equals PostgreSQL's Decimal)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, bool | str | bytes | None) or isinstance(b, bool | str | bytes | None):
        return type(a) is type(b) and a == b
    return a == b


def test_session_settings_are_in_force(pg):
    conn, _, _ = pg
    for name, value in SESSION_SETTINGS.items():
        shown = conn.execute(f"show {name}").fetchone()[0]
        # DateStyle keeps its input field order ("ISO, MDY"): output is ISO whatever it is
        assert shown.split(",")[0].lower() == value.lower(), name


def test_catalog_describes_every_column(pg):
    conn, _, relid = pg
    cols = {c.name: c for c in load_columns(conn, relid)}
    assert list(cols)[:2] == ["id", "c_bool"]
    assert cols["id"].not_null and not cols["c_bool"].not_null
    assert cols["c_num"].formatted == "numeric(10,2)"
    assert cols["c_int_2d"].ndims == 2 and cols["c_int_3d"].ndims == 3
    assert cols["c_int_2d"].type.element.name == "int4"
    assert cols["c_box_arr"].type.element.delimiter == ";"
    assert cols["c_mood"].type.kind == "e"
    assert cols["c_mood"].type.labels == ("sad", "ok", "happy", 'it\'s "quoted", really')
    price = cols["c_price"].type
    assert price.kind == "d" and price.base.name == "numeric" and price.typmod > 0
    assert cols["c_matrix"].type.ndims == 2 and cols["c_matrix"].type.base.element.name == "int4"
    assert cols["c_floatrange"].type.subtype.name == "float8"
    multi = cols["c_datemulti"].type
    assert multi.kind == "m" and multi.subtype.name == "daterange"
    assert multi.subtype.subtype.name == "date"
    assert cols["c_hstore"].type.name == "hstore" and cols["c_hstore"].type.schema != "pg_catalog"
    # a true array and not its lookalikes
    int2vector = load_type(conn, conn.execute("select 'int2vector'::regtype::oid").fetchone()[0])
    assert int2vector.element is None
    assert codec_for(_column("v", int2vector)).schema == "string"


def _column(name, pgtype):
    return Column(name, pgtype)


def test_every_type_round_trips_through_avro(pg):
    conn, schema, relid = pg
    columns = load_columns(conn, relid)
    names = [c.name for c in columns]
    texts = _texts(conn, schema, columns)
    key_schema, value_schema = record_schemas(schema, "everything", columns, ["id"])
    parsed = fastavro.parse_schema(value_schema)
    plain = fastavro.parse_schema(without_logical_types(value_schema))
    parsed_key = fastavro.parse_schema(key_schema)
    encode = row_encoder(columns)
    encode_key = row_encoder(columns, ["id"])
    write_row = row_writer(columns, value_schema)
    write_key = row_writer(columns, key_schema, ["id"])
    fields = [f["name"] for f in value_schema["fields"]]
    assert fields == names  # every name here is valid as is

    decoded = []
    for row in texts:
        record = encode(row)
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, record)
        assert write_row(row) == buf.getvalue()  # the capture's way, texts straight to bytes
        decoded.append(fastavro.schemaless_reader(io.BytesIO(buf.getvalue()), plain))
        assert encode_key(row) == {"id": int(row[0])}
        key_buf = io.BytesIO()
        fastavro.schemaless_writer(key_buf, parsed_key, encode_key(row))
        assert write_key(row) == key_buf.getvalue()

    refs = _references(conn, schema)
    for name in COLUMNS:
        for i, got in enumerate(r[name] for r in decoded):
            expected = refs[name][i]
            if name == "c_num_free" and isinstance(expected, Decimal):
                assert isinstance(got, str) and Decimal(got) == expected, (name, i, got)
                continue
            assert _same(got, expected), (name, i, got, expected)
    for (i, name), expected in LITERAL_TEXTS.items():
        assert decoded[i][name] == expected, (name, i)
    assert all(v is None for k, v in decoded[2].items() if k != "id")


def test_float4_is_the_exact_float32(pg):
    conn, schema, relid = pg
    query = f"select c_float4::text from {schema}.everything where id = 1"
    (text,) = conn.execute(query).fetchone()
    col = next(c for c in load_columns(conn, relid) if c.name == "c_float4")
    value = codec_for(col).from_text(text)
    assert text == "1.1" and value != 1.1 and value == float.fromhex("0x1.19999ap+0")


def test_copy_text_output_matches_the_select_texts(pg):
    """The snapshot reads with COPY: its fields, unescaped, are the same texts."""
    conn, schema, relid = pg
    columns = load_columns(conn, relid)
    with conn.cursor() as cur, cur.copy(f"copy {schema}.everything to stdout") as copy:
        data = b"".join(bytes(chunk) for chunk in copy)
    copied = [_copy_fields(line) for line in data.decode().split("\n") if line]
    copied.sort(key=lambda r: int(r[0]))
    assert copied == [list(r) for r in _texts(conn, schema, columns)]


def _copy_fields(line: str) -> list[str | None]:
    escapes = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
    out: list[str | None] = []
    for raw in line.split("\t"):
        if raw == "\\N":
            out.append(None)
            continue
        chars, i = [], 0
        while i < len(raw):
            c = raw[i]
            if c == "\\" and i + 1 < len(raw):
                nxt = raw[i + 1]
                chars.append(escapes.get(nxt, nxt))
                i += 2
            else:
                chars.append(c)
                i += 1
        out.append("".join(chars))
    return out


def test_value_errors_name_the_type(pg):
    conn, schema, _ = pg
    table = f"{schema}.errors"
    conn.execute(f"create table {table} (a int4[], t timestamp, n numeric(5,2))")
    conn.execute(
        f"insert into {table} values ('{{{{1,2}},{{3,4}}}}', '294276-12-31 23:59:59.999999', 1)"
    )
    relid = conn.execute(f"select '{table}'::regclass::oid").fetchone()[0]
    cols = load_columns(conn, relid)
    a, t, _n = conn.execute(f"select a::text, t::text, n::text from {table}").fetchone()
    # PostgreSQL ignores declared dimensions: a 2-D value in an int4[] column is published
    assert codec_for(cols[0]).from_text(a) == {
        "dimensions": [{"lower": 1, "length": 2}] * 2, "elements": [1, 2, 3, 4]}
    with pytest.raises(TypeConversionError, match="timestamp"):
        codec_for(cols[1]).from_text(t)
    with pytest.raises(TypeConversionError, match="column 't'"):
        row_encoder(cols)([a, t, None])


def test_a_replication_role_with_select_can_read_the_catalog(pg, stack):
    conn, schema, relid = pg
    role = f"repl_{uuid.uuid4().hex[:8]}"
    password = uuid.uuid4().hex
    conn.execute(f"create role {role} login replication password '{password}'")
    try:
        conn.execute(f"grant usage on schema {schema} to {role}")
        conn.execute(f"grant select on {schema}.everything to {role}")
        params = conninfo_to_dict(stack.pg_dsn)
        params.update(user=role, password=password)
        with psycopg.connect(make_conninfo(**params)) as limited:
            as_role = load_columns(limited, relid)
            assert (
                limited.execute(
                    "select rolsuper from pg_roles where rolname = current_user"
                ).fetchone()[0]
                is False
            )
        assert as_role == load_columns(conn, relid)
    finally:
        conn.execute(f"drop owned by {role}")
        conn.execute(f"drop role {role}")


def test_reference_json_helpers_are_not_vacuous(pg):
    """The reference queries really compute: a known interval and range come out right."""
    conn, _, _ = pg
    interval = interval_sql("interval 'P-1Y2M3DT-4H5M-6.5S'")
    (got,) = conn.execute(f"select {interval}").fetchone()
    assert got == {"months": -10, "days": 3, "microseconds": -14_106_500_000}
    daterange = range_sql("daterange('1970-01-02', null)", days_sql)
    (got,) = conn.execute(f"select {daterange}").fetchone()
    assert got == {
        "empty": False,
        "lower": 1,
        "upper": None,
        "lower_inclusive": True,
        "upper_inclusive": False,
    }
    assert json.loads(json.dumps(got)) == got


def test_generated_columns_are_left_out_like_copy_and_pgoutput_do(pg):
    conn, schema, _ = pg
    table = f"{schema}.generated"
    conn.execute(f"create table {table} (a int, b int generated always as (a * 2) stored, c text)")
    conn.execute(f"insert into {table} (a, c) values (1, 'x')")
    relid = conn.execute(f"select '{table}'::regclass::oid").fetchone()[0]
    assert [c.name for c in load_columns(conn, relid)] == ["a", "c"]
    every = load_columns(conn, relid, include_generated=True)
    assert [(c.name, c.generated) for c in every] == [("a", False), ("b", True), ("c", False)]
    with conn.cursor() as cur, cur.copy(f"copy {table} to stdout") as copy:
        data = b"".join(bytes(chunk) for chunk in copy)
    (line,) = data.decode().splitlines()
    assert row_encoder(load_columns(conn, relid))(_copy_fields(line)) == {"a": 1, "c": "x"}
