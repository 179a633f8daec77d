"""Property-based round trips, per type, against the real PostgreSQL of the test stack:
hypothesis writes a value's literal, PostgreSQL gives its text output (the capture's input),
the codec turns it into Avro, which is written and read back as the views read it, and the
replica's converter turns it into text that PostgreSQL reads back into the very same value
(its text output equal to the original's). Arrays get any dimensions and lower bounds against
their column's declaration."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture.source.typecatalog import load_columns
from materializers.postgres.values import text_converter
from schemas.avro_names import resolve_names
from schemas.avro_reader import compile_reader
from schemas.avro_schema import record_schemas, row_encoder, row_writer, without_logical_types
from schemas.avro_writer import compile_writer
from schemas.pgtypes import session_statements, text_parser

pytestmark = pytest.mark.stack


def quoted(text: str) -> str:
    """``text`` as a double-quoted element of an array, range or composite literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- element literals ---------------------------------------------------------------------

ints = st.integers(-(2**31), 2**31 - 1).map(str)
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                max_size=12)
numerics = st.decimals(min_value=-99999999, max_value=99999999, places=2,
                       allow_nan=False).map(str) | st.just("NaN")
floats = st.floats(allow_nan=True, allow_infinity=True).map(
    lambda f: "NaN" if f != f else ("Infinity" if f == float("inf") else
                                    "-Infinity" if f == float("-inf") else repr(f)))


@st.composite
def dates(draw, bc_years: int = 4713, ad_years: int = 5874896):
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from(["infinity", "-infinity"]))
    bc = draw(st.booleans())
    year = draw(st.integers(1, bc_years if bc else ad_years))
    text = f"{year:04d}-{draw(st.integers(1, 12)):02d}-{draw(st.integers(1, 28)):02d}"
    return text + (" BC" if bc else "")


@st.composite
def clocks(draw):
    hour, minute, second = draw(st.integers(0, 23)), draw(st.integers(0, 59)), \
        draw(st.integers(0, 59))
    micros = draw(st.integers(0, 999_999))
    return f"{hour:02d}:{minute:02d}:{second:02d}.{micros:06d}"


@st.composite
def timestamps(draw, tz: bool):
    day = draw(dates(bc_years=4713, ad_years=294000))
    if "infinity" in day:
        return day
    era = " BC" if day.endswith(" BC") else ""
    zone = draw(st.sampled_from(["+00", "+05:30", "-08"])) if tz else ""
    return f"{day.removesuffix(' BC')} {draw(clocks())}{zone}{era}"


times = clocks() | st.just("24:00:00")
small = st.integers(-10_000, 10_000)
intervals = st.builds(lambda y, m, d, h, s: f"P{y}Y{m}M{d}DT{h}H{s}S", small, small, small,
                      small, small) | st.just("0")


@st.composite
def int_ranges(draw):
    if draw(st.integers(0, 5)) == 0:
        return "empty"
    lo, hi = sorted([draw(st.integers(-1000, 1000)), draw(st.integers(-1000, 1000))])
    lower = "" if draw(st.integers(0, 4)) == 0 else str(lo)
    upper = "" if draw(st.integers(0, 4)) == 0 else str(hi)
    return draw(st.sampled_from("[(")) + lower + "," + upper + draw(st.sampled_from(")]"))


multiranges = st.lists(int_ranges(), max_size=4).map(lambda rs: "{" + ",".join(rs) + "}")
pairs = st.builds(lambda a, b: f"({a},{quoted(b)})", ints, texts)


@st.composite
def arrays(draw, element, max_dims: int = 3):
    """An array literal of 1 to ``max_dims`` dimensions, each of 1 to 3 elements starting at
    any lower bound (or ``{}``), with NULLs; every element quoted."""
    if draw(st.integers(0, 9)) == 0:
        return "{}"
    lengths = draw(st.lists(st.integers(1, 3), min_size=1, max_size=max_dims))
    lowers = [draw(st.sampled_from([1, 1, 0, -2, 5])) for _ in lengths]

    def level(depth: int) -> str:
        if depth == len(lengths):
            value = draw(element | st.none())
            return "NULL" if value is None else quoted(value)
        return "{" + ",".join(level(depth + 1) for _ in range(lengths[depth])) + "}"

    decoration = "".join(f"[{lo}:{lo + n - 1}]" for lo, n in zip(lowers, lengths, strict=True))
    return f"{decoration}={level(0)}"


# column → (SQL type, literal strategy)
CASES = {
    "c_int": ("int4", ints),
    "c_text": ("text", texts),
    "c_num": ("numeric(10,2)", numerics),
    "c_float": ("float8", floats),
    "c_date": ("date", dates()),
    "c_ts": ("timestamp", timestamps(False)),
    "c_tstz": ("timestamptz", timestamps(True)),
    "c_time": ("time", times),
    "c_interval": ("interval", intervals),
    "c_range": ("int4range", int_ranges()),
    "c_multi": ("int4multirange", multiranges),
    "c_pair": ("pair", pairs),
    "c_int_arr": ("int4[]", arrays(ints)),
    "c_int_arr2": ("int4[][]", arrays(ints)),
    "c_text_arr": ("text[]", arrays(texts)),
    "c_num_arr": ("numeric(10,2)[]", arrays(numerics)),
    "c_date_arr": ("date[]", arrays(dates())),
    "c_tstz_arr": ("timestamptz[]", arrays(timestamps(True), 2)),
    "c_interval_arr": ("interval[]", arrays(intervals, 2)),
    "c_range_arr": ("int4range[]", arrays(int_ranges(), 2)),
    "c_multi_arr": ("int4multirange[]", arrays(multiranges, 2)),
    "c_pair_arr": ("pair[]", arrays(pairs, 2)),
    "c_price_arr": ("price[]", arrays(numerics.filter(lambda n: n != "NaN"), 2)),
    "c_intarr": ("intarr", arrays(ints)),
    "c_intarr_arr": ("intarr[]", arrays(arrays(ints, 2), 2)),
}


@pytest.fixture(scope="module")
def catalog(stack):
    """(connection under the capture's session settings, {column: (codec parts)})."""
    schema = "roundtrip_values"
    conn = psycopg.connect(stack.pg_dsn, autocommit=True)
    try:
        for statement in session_statements():
            conn.execute(statement)
        conn.execute(f"drop schema if exists {schema} cascade")
        conn.execute(f"create schema {schema}")
        conn.execute(f"set search_path to {schema}, public")
        conn.execute("create type pair as (a int, b text)")
        conn.execute("create domain price as numeric(10,2)")
        conn.execute("create domain intarr as int4[]")
        columns = ", ".join(f"{name} {sql}" for name, (sql, _) in CASES.items())
        conn.execute(f"create table t (id int primary key, {columns})")
        relid = conn.execute("select 't'::regclass::oid").fetchone()[0]
        cols = load_columns(conn, relid)
        _, schema_doc = record_schemas(schema, "t", cols, [])
        resolved, named = resolve_names(schema_doc)
        fields = {f["name"]: f for f in resolved["fields"]}
        parts = {}
        for i, column in enumerate(cols):
            if column.name == "id":
                continue
            field = fields[column.name]
            parts[column.name] = (
                column, i,
                text_converter(field["type"], named, field["pg.type"], field["pg.type"]),
                text_parser(field["type"], named, field["pg.type"]),
            )
        codec = (row_encoder(cols), compile_writer(schema_doc),
                 compile_reader(without_logical_types(schema_doc)), row_writer(cols, schema_doc))
        yield conn, cols, codec, parts
    finally:
        conn.execute(f"drop schema if exists {schema} cascade")
        conn.close()


@pytest.mark.parametrize("name", list(CASES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_text_to_avro_to_text_is_the_same_value(catalog, name, data):
    conn, cols, (encode, write, read, write_row), parts = catalog
    sql_type, literal = CASES[name]
    column, position, to_text, from_schema = parts[name]
    original = conn.execute(f"select %s::{sql_type}::text", (data.draw(literal),)).fetchone()[0]

    # the capture: text → Avro record → bytes; a view: bytes → values without logical types
    row: list[str | None] = [None] * len(cols)
    row[0], row[position] = "1", original
    record = encode(row)
    decoded = read(write(record), 0)[name]
    assert write_row(row) == write(record)  # the capture's way, texts straight to bytes
    # pg.missing's parser agrees with the codec (reprs: NaN is not equal to itself)
    assert repr(from_schema(original)) == repr(record[name])

    # the replica: value → text, which PostgreSQL reads as the original value
    text = to_text(decoded)
    back = conn.execute(f"select %s::{sql_type}::text", (text,)).fetchone()[0]
    assert back == original, (original, decoded, text)
