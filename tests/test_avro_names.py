"""The one Avro schema walk (schemas.avro_names): full names by the Avro specification's rule,
and every view resolving references through it."""

from __future__ import annotations

import fastavro

from materializers.postgres.values import derived_type, text_converter
from materializers.search.documents import Layout
from materializers.warehouse.types import RecordLayout
from schemas.avro_names import full_name, resolve_names


def _point(namespace: str | None = None) -> dict:
    rec = {"type": "record", "name": "Point",
           "fields": [{"name": "x", "type": "int"}, {"name": "y", "type": "int"}]}
    if namespace is not None:
        rec["namespace"] = namespace
    return rec


def test_full_names_follow_the_spec():
    assert full_name("a.b.C", "x.y") == "a.b.C"  # a dotted name is full: the namespace is ignored
    assert full_name("C", "x.y") == "x.y.C"
    assert full_name("C", "") == full_name("C", None) == "C"


def test_a_short_reference_resolves_in_the_enclosing_namespace_only():
    # two types share the short name Point in two namespaces: each reference finds its own
    schema = {"type": "record", "name": "T", "namespace": "outer", "fields": [
        {"name": "a", "type": _point()},  # outer.Point (inherits the record's namespace)
        {"name": "b", "type": {"type": "record", "name": "Inner", "namespace": "other",
                               "fields": [{"name": "p", "type": _point(),  # other.Point
                                           }, {"name": "q", "type": "Point"}]}},
        {"name": "c", "type": ["null", "Point"]},  # outer.Point
        {"name": "d", "type": {"type": "array", "items": "other.Point"}},
    ]}
    fastavro.parse_schema(schema)  # the decoder's reading of the same schema: it is valid
    resolved, named = resolve_names(schema)
    assert list(named) == ["outer.T", "outer.Point", "other.Inner", "other.Point"]
    fields = {f["name"]: f["type"] for f in resolved["fields"]}
    inner = {f["name"]: f["type"] for f in fields["b"]["fields"]}
    assert inner["q"] == "other.Point"
    assert fields["c"] == ["null", "outer.Point"]
    assert fields["d"]["items"] == "other.Point"
    assert named["other.Point"]["namespace"] == "other"
    assert "namespace" not in schema["fields"][0]["type"]  # the input is left as it was


def test_a_dotted_definition_sets_the_namespace_of_what_it_encloses():
    schema = {"type": "record", "name": "a.b.T", "namespace": "ignored", "fields": [
        {"name": "p", "type": _point()}, {"name": "q", "type": "Point"}]}
    resolved, named = resolve_names(schema)
    assert list(named) == ["a.b.T", "a.b.Point"]
    assert resolved["fields"][1]["type"] == "a.b.Point"


def test_a_reference_without_a_namespace_is_its_own_name():
    schema = {"type": "record", "name": "T", "fields": [
        {"name": "p", "type": _point()}, {"name": "q", "type": "Point"},
        {"name": "w", "type": {"type": "Point"}}]}
    resolved, named = resolve_names(schema)
    assert list(named) == ["T", "Point"]
    assert resolved["fields"][2]["type"] == {"type": "Point"}


INTERVAL = {"type": "record", "name": "Interval", "namespace": "bottler.pg", "fields": [
    {"name": "months", "type": "int"}, {"name": "days", "type": "int"},
    {"name": "microseconds", "type": "long"}]}


def _table_schema() -> dict:
    """As the capture writes it: a named type defined at its first use, referenced by full name
    afterwards (a domain over interval is not a type the target has: typed from Avro)."""
    return {"type": "record", "name": "t", "namespace": "public", "fields": [
        {"name": "a", "type": ["null", INTERVAL], "default": None, "pg.type": "interval"},
        {"name": "b", "type": ["null", "bottler.pg.Interval"], "default": None,
         "pg.type": "public.span"}]}


def test_every_view_resolves_a_reference_to_a_type_defined_in_an_earlier_field():
    schema, named = resolve_names(_table_schema())
    b = schema["fields"][1]
    assert derived_type(b["type"], named) == "interval"  # the replica's column type
    value = {"months": 1, "days": 2, "microseconds": 3_000_000}
    assert text_converter(b["type"], named)(value) == "P1M2DT0H0M3S"
    layout = Layout.of(_table_schema(), "flattened")  # the search index: a record's properties
    assert set(layout.properties["b"]["properties"]) == {"months", "days", "microseconds"}
    warehouse = RecordLayout(_table_schema())  # the warehouse: an Arrow struct
    assert [m.arrow for _, _, m in warehouse.fields][0] == [m.arrow for _, _, m in
                                                             warehouse.fields][1]
    assert str(warehouse.fields[1][2].arrow).startswith("struct<months: int32")
