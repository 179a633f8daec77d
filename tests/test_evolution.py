"""schemas.evolution: the value rows older than a column hold (``pg.missing``), read from the
schema as the capture writes it, and the rule for the versions a view meets."""

from __future__ import annotations

import pytest

from schemas.avro_schema import record_schemas
from schemas.evolution import Evolution, missing_values, older_rows
from schemas.pgtypes import Column, PgType, codec_for


def T(name: str, kind: str = "b", category: str = "U", schema: str = "pg_catalog", **kw):
    return PgType(1000, name, schema, kind, category, **kw)


INT4, TEXT, INTERVAL, BOX = T("int4"), T("text"), T("interval"), T("box")
INT4RANGE = T("int4range", kind="r", category="R", subtype=INT4)
NUMERIC_10_2 = ((10 << 16) | 2) + 4

# (type, typmod, ndims, the column's default as PostgreSQL prints it)
CASES = [
    (INT4, -1, 0, "7"),
    (T("int8"), -1, 0, "-9000000000"),
    (T("bool"), -1, 0, "t"),
    (T("float4"), -1, 0, "0.1"),
    (T("float8"), -1, 0, "-Infinity"),
    (T("numeric"), NUMERIC_10_2, 0, "12.50"),
    (T("numeric"), NUMERIC_10_2, 0, "NaN"),
    (T("numeric"), -1, 0, "3.14159265358979323846"),
    (T("money"), -1, 0, "$1,234.56"),
    (T("bytea"), -1, 0, "\\x00ff"),
    (T("uuid"), -1, 0, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
    (T("date"), -1, 0, "2024-02-29"),
    (T("date"), -1, 0, "infinity"),
    (T("timestamp"), -1, 0, "2024-01-01 12:00:00.5"),
    (T("timestamptz"), -1, 0, "1999-12-31 23:59:59+00"),
    (T("time"), -1, 0, "24:00:00"),
    (INTERVAL, -1, 0, "P1Y2M3DT4H5M6S"),
    (TEXT, -1, 0, "eu"),
    (INT4RANGE, -1, 0, "[1,10)"),
    (T("int4multirange", kind="m", category="R", subtype=INT4RANGE), -1, 0, "{[1,3),[5,7)}"),
    (T("_int4", category="A", element=INT4), -1, 1, "{1,NULL,3}"),
    (T("_int4", category="A", element=INT4), -1, 2, "{{1,2},{3,4}}"),
    (T("_text", category="A", element=TEXT), -1, 1, '{"a,b",NULL,"NULL"}'),
    (T("_box", category="A", element=BOX), -1, 1, "{(1,1),(0,0);(2,2),(1,1)}"),
    (T("_interval", category="A", element=INTERVAL), -1, 1, "{P1D,PT1S}"),
    (T("hstore", schema="public"), -1, 0, '"a"=>"1", "b"=>NULL'),
    (T("mood", kind="e", schema="public", labels=("sad", "ok")), -1, 0, "ok"),
    (T("span", kind="d", schema="public", base=INTERVAL), -1, 0, "P2D"),
]


@pytest.mark.parametrize(("pg", "typmod", "ndims", "text"), CASES,
                         ids=[f"{c[0].name}-{c[3]}" for c in CASES])
def test_missing_values_read_as_the_capture_would_write_them(pg, typmod, ndims, text):
    # an interval column first: later interval fields refer to its type by name, as captured
    formatted = "box[]" if pg.name == "_box" else ""  # format_type's text: the delimiter
    columns = [Column("first", INTERVAL),
               Column("c", pg, typmod, ndims=ndims, formatted=formatted, missing=text)]
    _, value = record_schemas("public", "t", columns, [])
    assert missing_values(value) == {"c": codec_for(columns[1]).parse(text)}


def test_a_default_that_does_not_read_as_its_type_says_which_field():
    _, value = record_schemas("public", "t", [Column("n", INT4, missing="x")], [])
    with pytest.raises(ValueError, match="pg.missing 'x' of field 'n'"):
        missing_values(value)


def _schema(*fields: tuple[str, str | None]) -> dict:
    columns = [Column(name, TEXT, missing=missing) for name, missing in fields]
    return record_schemas("public", "accounts", columns, [])[1]


V1 = _schema(("id", None), ("name", None))
V2 = _schema(("id", None), ("name", None), ("region", "eu"))  # ADD COLUMN region DEFAULT 'eu'
V3 = _schema(("id", None), ("name", None), ("region", "eu"), ("note", None))  # no default
V4 = _schema(("id", None), ("name", None))  # region dropped


def test_a_view_applies_a_default_once_when_the_column_appears():
    evolution = Evolution()
    assert evolution.added(V1) == {}
    assert evolution.added(V2) == {"region": "eu"}
    assert evolution.added(V2) == {}  # the same version again
    assert evolution.added(V3) == {}  # region was there already; note has no default
    assert evolution.added(V4) == {}
    assert evolution.added(V2) == {"region": "eu"}  # added again


def test_a_view_that_just_started_applies_every_default_of_the_first_version_it_meets():
    assert Evolution().added(V3) == {"region": "eu"}  # harmless: only rows without it take it


def test_in_a_batch_rows_of_versions_older_than_a_column_take_its_default():
    out = older_rows([V1, V2, V3, V4])
    assert [{name: value for name, (_, value) in o.items()} for o in out] == [
        {"region": "eu"}, {}, {}, {}]  # a row written after the drop holds no region
    assert out[0]["region"][0] is V3  # the latest version carrying the column says it
