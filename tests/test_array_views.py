"""The views map an array column (the union of its declared shape and the general array
record) as its declared array, and take values of either branch."""

from __future__ import annotations

import pyarrow as pa
import pytest

from materializers.search.fields import field_shape
from materializers.warehouse.types import OutOfRange, mapped
from schemas.avro_names import resolve_names
from schemas.pgtypes import Column, PgType, codec_for, nullable

DATE = PgType(1082, "date", "pg_catalog", "b", "D")
DATES = PgType(1182, "_date", "pg_catalog", "b", "A", element=DATE)


def field_type(ndims: int):
    codec = codec_for(Column("c", DATES, ndims=ndims))
    schema, named = resolve_names(
        {"type": "record", "name": "r", "fields": [{"name": "c", "type": nullable(codec.schema)}]})
    return codec, schema["fields"][0]["type"], named


def test_the_warehouse_keeps_the_declared_list_type_and_fits_values_of_as_many_dimensions():
    codec, avro, named = field_type(2)
    m = mapped(avro, named)
    assert m.arrow == pa.list_(pa.list_(pa.date32()))
    declared = codec.from_text("{{1970-01-02}}")
    bounded = codec.from_text("[0:0][3:4]={{1970-01-03,infinity}}")
    assert isinstance(bounded, dict)
    assert m.array([declared, bounded, None]).to_pylist()[1][0][0].isoformat() == "1970-01-03"
    with pytest.raises(OutOfRange, match="1 dimension"):
        m.array([codec.from_text("{1970-01-02}")])


def test_search_indexes_values_of_any_shape_as_their_elements():
    codec, avro, named = field_type(1)
    mapping, convert = field_shape(avro, "date[]", named)
    assert mapping["type"] == "date"
    assert convert(codec.from_text("{1970-01-02}")) == ["1970-01-02"]
    assert convert(codec.from_text("{{1970-01-02,NULL},{1970-01-03,1970-01-04}}")) == [
        "1970-01-02", None, "1970-01-03", "1970-01-04"]
