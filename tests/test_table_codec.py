"""capture/publish/encoding.py: a table's codec writes a row's texts straight to framed Avro, and
a row it cannot encode is refused with the column named (the way through the record's dict)."""

from __future__ import annotations

import pytest

from capture.publish.encoding import CodecSpec, Unencodable
from schemas.avro_schema import record_schemas, row_encoder
from schemas.pgtypes import Column, PgType
from schemas.serde import AvroEncoder


def scalar(name: str) -> PgType:
    return PgType(1000, name, "pg_catalog", "b", "U")


COLUMNS = (Column("id", scalar("int4"), not_null=True), Column("a", scalar("text")),
           Column("t", scalar("timestamptz"), formatted="timestamp with time zone"))


def codec(fmt: str = "avro"):
    key, value = record_schemas("public", "items", list(COLUMNS), ["id"])
    return CodecSpec("public", "items", "p.items", COLUMNS, ("id",), fmt, key, value, 11,
                     12).codec()


def test_a_row_is_what_the_schema_writer_makes_of_its_record():
    items = codec()
    spec = items.spec
    for row in (("1", "x", "2024-06-01 12:00:00+02"), ("-70000", None, None),
                ("2147483647", "ü" * 10_000, "infinity")):
        assert items.key(row) == AvroEncoder(11, spec.key_schema).encode(
            row_encoder(COLUMNS, ["id"])(row))
        assert items.value(row) == AvroEncoder(12, spec.value_schema).encode(
            row_encoder(COLUMNS)(row))
        assert items.value(row)[:5] == b"\x00\x00\x00\x00\x0c"  # Confluent's frame, id 12


def test_a_row_it_cannot_encode_names_the_table_and_the_column():
    items = codec()
    with pytest.raises(Unencodable, match=r"public.items: cannot encode a row: .*'soon'.*"
                                          r"column 't'"):
        items.value(("1", "x", "soon"))
    with pytest.raises(Unencodable, match=r"public.items: cannot encode the key: .*column 'id'"):
        items.key((None, "x", None))
    with pytest.raises(Unencodable, match="field 'id': 2147483648 is out of range for Avro int"):
        items.value(("2147483648", None, None))  # beyond Avro's int


def test_json_rows_are_unchanged():
    items = codec("json")
    assert items.value(("1", "x", None)) == b'{"id":1,"a":"x","t":null}'
    assert items.key(("1", "x", None)) == b'{"id":1}'
