"""The registry's compatibility levels, checked on schema pairs without any server."""

import json

import avro.schema
import pytest

from schemas.registry_server import compatibility as compat


def record(*fields: dict, name: str = "User") -> avro.schema.Schema:
    return compat.parse(json.dumps({"type": "record", "name": name, "fields": list(fields)}))


def enum(*symbols: str) -> avro.schema.Schema:
    return record({"name": "status", "type": {"type": "enum", "name": "S", "symbols": symbols}})


ID = {"name": "id", "type": "int"}
ID_LONG = {"name": "id", "type": "long"}
EMAIL_DEFAULT = {"name": "email", "type": "string", "default": ""}
EMAIL = {"name": "email", "type": "string"}

V1 = record(ID)
V2_EMAIL_DEFAULT = record(ID, EMAIL_DEFAULT)
V2_EMAIL = record(ID, EMAIL)


def problems(level: str, new: avro.schema.Schema, *old: avro.schema.Schema) -> list[str]:
    return compat.check(level, new, list(enumerate(old, start=1)))


def test_backward_is_the_default():
    assert compat.DEFAULT_LEVEL == "BACKWARD"


def test_backward_accepts_added_field_with_default():
    assert problems("BACKWARD", V2_EMAIL_DEFAULT, V1) == []


def test_backward_refuses_added_field_without_default():
    found = problems("BACKWARD", V2_EMAIL, V1)
    assert len(found) == 1
    assert "reader_field_missing_default_value" in found[0]
    assert "email" in found[0]
    assert "version 1" in found[0]


def test_backward_accepts_removed_field():
    # The new reader simply ignores the field old data carries.
    assert problems("BACKWARD", V1, V2_EMAIL) == []


def test_forward_refuses_removed_field_without_default():
    # Old readers need the field; new data lacks it and the old schema has no default.
    found = problems("FORWARD", V1, V2_EMAIL)
    assert found and "version 1 cannot read" in found[0]


def test_forward_accepts_removed_field_with_default():
    assert problems("FORWARD", V1, V2_EMAIL_DEFAULT) == []


def test_forward_accepts_added_field_without_default():
    assert problems("FORWARD", V2_EMAIL, V1) == []


def test_type_promotion_int_to_long_is_backward_not_forward():
    assert problems("BACKWARD", record(ID_LONG), V1) == []
    found = problems("FORWARD", record(ID_LONG), V1)
    assert found and "type_mismatch" in found[0]


def test_incompatible_type_change_refused():
    found = problems("BACKWARD", record({"name": "id", "type": "string"}), V1)
    assert found and "type_mismatch" in found[0]


def test_enum_adding_symbol_is_backward_not_forward():
    old, new = enum("ACTIVE"), enum("ACTIVE", "BLOCKED")
    assert problems("BACKWARD", new, old) == []
    found = problems("FORWARD", new, old)
    assert found and "missing_enum_symbols" in found[0] and "BLOCKED" in found[0]


def test_enum_removing_symbol_is_not_backward():
    found = problems("BACKWARD", enum("ACTIVE"), enum("ACTIVE", "BLOCKED"))
    assert found and "missing_enum_symbols" in found[0]


def test_full_needs_both_directions():
    assert problems("FULL", V2_EMAIL_DEFAULT, V1) == []
    assert problems("FULL", V2_EMAIL, V1) != []  # backward fails
    assert problems("FULL", record(ID_LONG), V1) != []  # forward fails


def test_renamed_record_refused():
    found = problems("BACKWARD", record(ID, name="Account"), V1)
    assert found and "name_mismatch" in found[0]


def test_non_transitive_checks_only_the_latest_version():
    # v1 has no email, v2 adds it with a default, v3 drops the default: fine against v2 only.
    assert problems("BACKWARD", V2_EMAIL, V1, V2_EMAIL_DEFAULT) == []
    assert problems("FORWARD", V1, V2_EMAIL, V2_EMAIL_DEFAULT) == []


def test_backward_transitive_checks_every_version():
    found = problems("BACKWARD_TRANSITIVE", V2_EMAIL, V1, V2_EMAIL_DEFAULT)
    assert len(found) == 1 and "version 1" in found[0]


def test_forward_transitive_checks_every_version():
    found = problems("FORWARD_TRANSITIVE", V1, V2_EMAIL, V2_EMAIL_DEFAULT)
    assert len(found) == 1 and "version 1" in found[0]


def test_full_transitive_checks_every_version_both_ways():
    assert problems("FULL_TRANSITIVE", V2_EMAIL_DEFAULT, V1, V2_EMAIL_DEFAULT) == []
    found = problems("FULL_TRANSITIVE", V2_EMAIL, V1, V2_EMAIL_DEFAULT)
    assert any("version 1" in p for p in found)


def test_none_accepts_anything():
    assert problems("NONE", record({"name": "x", "type": "string"}, name="Other"), V1) == []


def test_first_version_is_always_compatible():
    assert problems("FULL_TRANSITIVE", V2_EMAIL) == []


def test_nullable_union_widening_is_backward():
    nullable = record({"name": "id", "type": ["null", "int"], "default": None})
    assert problems("BACKWARD", nullable, V1) == []
    found = problems("BACKWARD", V1, nullable)
    assert found and "type_mismatch" in found[0]


def test_unknown_level_rejected():
    with pytest.raises(ValueError):
        compat.check("SIDEWAYS", V1, [(1, V1)])


@pytest.mark.parametrize(
    "text", ["not json", '{"type": "bogus"}', '{"type": "record", "name": "R"}', "42"]
)
def test_invalid_schema_text_rejected(text):
    with pytest.raises(compat.InvalidSchema):
        compat.parse(text)
