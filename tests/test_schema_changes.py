"""What a table's new description says about the rows already published (capture/
schema_changes.py): renames told from a drop plus an add, type changes, and columns a table
rewrite filled; and the renamed field's marks in the schema, which keep a renamed key column
BACKWARD-compatible in the registry."""

from __future__ import annotations

import json

import pytest

from capture.stream.schema_changes import Attributes, compare, shape_of
from schemas.avro_schema import record_schemas
from schemas.pgtypes import Column, PgType
from schemas.registry_server import compatibility

INT, TEXT = "integer", "text"


def catalog(*live: tuple[str, int], dropped: tuple[int, ...] = (),
            rewritten: frozenset[str] = frozenset()) -> Attributes:
    return Attributes(dict(live), dropped, rewritten)


@pytest.mark.parametrize("old, new, attributes, renamed", [
    # RENAME COLUMN of the last column: no dropped column before it in the catalog
    ([("id", INT), ("a", TEXT)], [("id", INT), ("a2", TEXT)],
     catalog(("id", 1), ("a2", 2)), {"a2": "a"}),
    # DROP COLUMN a; ADD COLUMN a2: the same Relation message, but a dropped column lies before
    ([("id", INT), ("a", TEXT)], [("id", INT), ("a2", TEXT)],
     catalog(("id", 1), ("a2", 3), dropped=(2,)), {}),
    # a column in the middle: nothing is ever added there, so it is a rename whatever the catalog
    ([("id", INT), ("a", TEXT), ("b", INT)], [("id", INT), ("x", TEXT), ("b", INT)],
     catalog(), {"x": "a"}),
    # two renamed at once, and a column added after them
    ([("id", INT), ("a", TEXT), ("b", INT)], [("id", INT), ("a2", TEXT), ("b2", INT), ("c", INT)],
     catalog(("id", 1), ("a2", 2), ("b2", 3), ("c", 4)), {"a2": "a", "b2": "b"}),
    # the key column renamed (the first one)
    ([("id", INT), ("a", TEXT)], [("ident", INT), ("a", TEXT)], catalog(), {"ident": "id"}),
    # the catalog is ahead of the stream (renamed again since): unsure, so not a rename
    ([("id", INT), ("a", TEXT)], [("id", INT), ("a2", TEXT)], catalog(("id", 1), ("a3", 2)), {}),
    # an added column, a dropped one: no rename
    ([("id", INT), ("a", TEXT)], [("id", INT), ("a", TEXT), ("b", INT)],
     catalog(("id", 1), ("a", 2), ("b", 3)), {}),
    ([("id", INT), ("a", TEXT), ("b", INT)], [("id", INT), ("b", INT)], catalog(), {}),
])
def test_renames_are_told_from_a_drop_plus_an_add(old, new, attributes, renamed):
    assert compare(old, new, attributes).renamed == renamed


def test_a_column_met_before_is_known_by_its_attnum():
    old, new = [("id", INT), ("b", TEXT)], [("id", INT), ("c", TEXT)]
    # DROP COLUMN a long ago left a dropped attnum 2 before b (3): by position, unsure
    now = catalog(("id", 1), ("c", 3), dropped=(2,))
    assert compare(old, new, now).renamed == {}
    met = catalog(("id", 1), ("b", 3), dropped=(2,))
    assert compare(old, new, now, before=met).renamed == {"c": "b"}
    # the capture met b when the catalog was already ahead (renamed to c): no dropped column
    # since, so c took b's place
    ahead = catalog(("id", 1), ("c", 3), dropped=(2,))
    assert compare(old, new, now, before=ahead).renamed == {"c": "b"}
    # DROP COLUMN b; ADD COLUMN c: a column dropped since, before c
    assert compare(old, new, catalog(("id", 1), ("c", 4), dropped=(2, 3)),
                   before=met).renamed == {}


def test_what_asks_for_the_rows_to_be_published_again():
    same = [("id", INT), ("a", TEXT)]
    assert compare(same, same, catalog()).republish() is None
    # a column added without a default, or with a non-volatile one (attmissingval): nothing
    assert compare(same, [*same, ("b", INT)], catalog(("b", 3))).republish() is None
    # ALTER COLUMN a TYPE integer USING length(a): every row's value may have changed
    change = compare(same, [("id", INT), ("a", INT)], catalog())
    assert change.retyped == ("a",) and change.republish() == "column a changed type"
    # a typmod is part of the type (varchar(10) -> varchar(5) USING left(a, 5))
    assert compare([("a", "character varying(10)")], [("a", "character varying(5)")],
                   catalog()).retyped == ("a",)
    # ADD COLUMN b float8 DEFAULT random(): the rewrite gave each older row its own value
    change = compare(same, [*same, ("b", "double precision")],
                     catalog(("id", 1), ("a", 2), ("b", 3), rewritten=frozenset({"b"})))
    assert change.rewritten == ("b",)
    assert change.republish() == "column b added with a value per row"
    # renamed and retyped at once
    change = compare(same, [("id", INT), ("a2", INT)], catalog(("id", 1), ("a2", 2)))
    assert change.republish() == "column a renamed to a2; column a2 changed type"


def _columns(*names_types: tuple[str, str]) -> list[Column]:
    types = {"integer": PgType(23, "int4", "pg_catalog", "b", "N"),
             "text": PgType(25, "text", "pg_catalog", "b", "S")}
    return [Column(name=n, type=types[t], formatted=t, not_null=n == "id")
            for n, t in names_types]


def test_a_renamed_field_carries_its_old_name_and_stays_compatible():
    before = _columns(("id", INT), ("a", TEXT))
    after = _columns(("ident", INT), ("a", TEXT))
    old_key, old_value = record_schemas("public", "sc", before, ["id"])
    key, value = record_schemas("public", "sc", after, ["ident"],
                                renamed={"ident": ("id", "id")})
    field = value["fields"][0]
    assert field["pg.renamed"] == "id" and field["aliases"] == ["id"]
    assert key["fields"][0]["aliases"] == ["id"]
    assert shape_of(value) == [("ident", INT), ("a", TEXT)]
    # keys have no defaults: without the alias, the renamed key field could not read the old one
    parse = compatibility.parse
    assert compatibility.check("BACKWARD", parse(json.dumps(key)),
                               [(1, parse(json.dumps(old_key)))]) == []
    plain, _ = record_schemas("public", "sc", after, ["ident"])
    assert compatibility.check("BACKWARD", parse(json.dumps(plain)),
                               [(1, parse(json.dumps(old_key)))]) != []


def test_the_catalog_tells_which_added_columns_a_rewrite_filled(source):
    """PostgreSQL keeps a non-volatile default as attmissingval; a volatile one, an identity or a
    serial rewrites the table with a value per row."""
    import psycopg

    from tests.support.databases import execute

    def attributes() -> Attributes:
        with psycopg.connect(source, autocommit=True) as conn:
            return Attributes.of(conn, conn.execute("select 'w'::regclass::oid").fetchone()[0])

    execute(source, "create table w (id int primary key, gone int)",
            "insert into w select generate_series(1, 3)", "alter table w drop column gone",
            "alter table w add column plain int",
            "alter table w add column constant int default 7",
            "alter table w add column stable timestamptz default now()")
    assert attributes().rewritten == set()
    assert attributes().dropped == (2,) and attributes().attnums["plain"] == 3
    execute(source, "alter table w add column volatile float8 default random()",
            "alter table w add column ident int generated always as identity",
            "alter table w add column counter serial")
    # the rewrite also wrote the older defaults into every row (attmissingval is gone): a
    # capture that meets those columns only now publishes the table again, rightly
    assert attributes().rewritten == {"volatile", "ident", "counter", "constant", "stable"}
