"""schemas/avro_reader: compiled Avro decoders, value for value what fastavro reads."""

from __future__ import annotations

import io
import json
import math
import struct
import uuid
from decimal import Decimal

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from materializers.core.decode import DecodeError, Decoder
from schemas.avro_reader import AvroReadError, compile_reader
from schemas.avro_schema import record_schemas, row_encoder, without_logical_types
from schemas.avro_writer import compile_writer
from tests.support.avro_cases import CASES, PG_COLUMNS, SCHEMAS, _rename, _rows, dec, record

SETTINGS = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def fastavro_bytes(schema, datum) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), datum)
    return buf.getvalue()


def fastavro_read(schema, data: bytes):
    """fastavro's datum, or the exception it raised; and whether it read all the bytes."""
    buf = io.BytesIO(data)
    try:
        datum = fastavro.schemaless_reader(buf, fastavro.parse_schema(schema), None)
    except Exception as exc:  # noqa: BLE001 - compared with what the compiled reader raises
        return exc, False
    return datum, buf.tell() == len(data)


def same(a, b) -> bool:
    """Equal values of the same classes all the way down (NaN equals NaN, -0.0 is not 0.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return math.copysign(1, a) == math.copysign(1, b) and (a == b or a != a and b != b)
    if isinstance(a, Decimal):
        return a.as_tuple() == b.as_tuple()  # Decimal("1.0") == Decimal("1.00"), not the same
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return a == b


def check(schema, data: bytes, read=None, start: int = 0):
    """The compiled reader returns what fastavro reads from ``data[start:]``, or both fail."""
    read = read or compile_reader(schema)
    assert read is not None
    expected, complete = fastavro_read(schema, data[start:])
    if isinstance(expected, Exception) or not complete:
        with pytest.raises(ValueError):
            read(data, start)
        return expected
    ours = read(data, start)
    assert same(ours, expected), (ours, expected)
    return ours


def takes_no_bytes(schema, named=None) -> bool:
    """Whether a datum of this (parsed) schema can be encoded in no bytes at all."""
    named = {} if named is None else named
    if isinstance(schema, str):
        return schema == "null" or (schema in named and takes_no_bytes(named[schema], named))
    if isinstance(schema, list):
        return False
    if schema.get("type") in ("record", "error"):
        named[schema["name"]] = schema
        return all(takes_no_bytes(f["type"], named) for f in schema["fields"])
    return schema.get("type") == "fixed" and schema["size"] == 0


def has_array_of_nothing(schema, named=None) -> bool:
    named = {} if named is None else named
    if isinstance(schema, list):
        return any(has_array_of_nothing(s, named) for s in schema)
    if not isinstance(schema, dict):
        return False
    if "name" in schema:
        named[schema["name"]] = schema
    kind = schema["type"]
    if kind == "array":
        return takes_no_bytes(schema["items"], named) or has_array_of_nothing(
            schema["items"], named
        )
    if kind == "map":
        return has_array_of_nothing(schema["values"], named)
    if kind in ("record", "error"):
        return any(has_array_of_nothing(f["type"], named) for f in schema["fields"])
    return False


# --------------------------------------------------------------------------- valid data


@pytest.mark.parametrize(("schema", "datum"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_writer_cases(schema, datum):
    data = fastavro_bytes(schema, datum)
    check(schema, data)
    check(without_logical_types(schema), data)


@SETTINGS
@given(st.data())
def test_generated_schemas_and_data(data):
    schema, values = data.draw(SCHEMAS)
    schema = _rename(schema, [0])
    plain = without_logical_types(schema)
    read, read_plain = compile_reader(schema), compile_reader(plain)
    if read is None:
        assert has_array_of_nothing(fastavro.parse_schema(schema))
        return
    for _ in range(3):
        datum = data.draw(values)
        try:
            encoded = fastavro_bytes(schema, datum)
        except (ValueError, TypeError):
            continue  # the writers' tests care about those
        check(schema, encoded, read)
        check(plain, b"\x00\x00\x00\x00\x07" + encoded, read_plain, start=5)
        for cut in sorted({0, len(encoded) // 2, len(encoded) - 1}):
            if 0 <= cut < len(encoded):
                with pytest.raises(AvroReadError):
                    read_plain(encoded[:cut], 0)
        with pytest.raises(AvroReadError, match="1 bytes left"):
            read_plain(encoded + b"\x00", 0)


@SETTINGS
@given(st.data())
def test_random_bytes_are_read_as_fastavro_reads_them_or_refused(data):
    schema, _ = data.draw(SCHEMAS)
    schema = without_logical_types(_rename(schema, [0]))
    read = compile_reader(schema)
    assume(read is not None)
    for _ in range(5):
        junk = data.draw(st.binary(max_size=24))
        try:
            ours = read(junk, 0)
        except AvroReadError:
            continue
        expected, complete = fastavro_read(schema, junk)
        assert complete and same(ours, expected), (ours, expected)


@pytest.mark.parametrize(("column", "texts"), PG_COLUMNS, ids=[c.name for c, _ in PG_COLUMNS])
def test_every_postgres_type(column, texts):
    key_schema, value_schema = record_schemas("public", "t", [column], [column.name])
    values, keys = row_encoder([column]), row_encoder([column], [column.name])
    write_value, write_key = compile_writer(value_schema), compile_writer(key_schema)
    plain_value, plain_key = without_logical_types(value_schema), without_logical_types(key_schema)
    read_value, read_key = compile_reader(plain_value), compile_reader(plain_key)
    for row in _rows([column], [texts]):
        check(plain_value, write_value(values(row)), read_value)
        if row[0] is not None:
            check(plain_key, write_key(keys(row)), read_key)


def test_all_postgres_types_in_one_record():
    columns, texts = [c for c, _ in PG_COLUMNS], [t for _, t in PG_COLUMNS]
    _, value_schema = record_schemas("My Schema", "every type", columns, [])
    plain = without_logical_types(value_schema)
    encode, write, read = row_encoder(columns), compile_writer(value_schema), compile_reader(plain)
    for row in _rows(columns, texts):
        datum = check(plain, b"\x00\x00\x00\x00\x01" + write(encode(row)), read, start=5)
        assert isinstance(datum, dict)


def test_logical_types_are_fastavros():
    schema = record(
        ("u", {"type": "string", "logicalType": "uuid"}),
        ("ts", {"type": "long", "logicalType": "timestamp-micros"}),
        ("d", {"type": "int", "logicalType": "date"}),
        ("m", dec(5, 2)),
        ("f", dec(4, 1, "fixed", name="F", size=2)),
    )
    value = {"u": uuid.uuid4(), "ts": 1717243200123456, "d": 19000, "m": Decimal("-1.5")}
    datum = check(schema, fastavro_bytes(schema, value | {"f": Decimal("12.3")}))
    assert isinstance(datum["u"], uuid.UUID) and datum["m"] == Decimal("-1.50")
    assert check(without_logical_types(schema), fastavro_bytes(schema, value | {"f": b"\0\1"}))


@SETTINGS
@given(st.integers(1, 45), st.data())
def test_decimals_of_any_payload(precision, data):
    # more digits than the precision: rounded, as fastavro's context rounds them
    scale = data.draw(st.integers(0, precision))
    payload = data.draw(st.binary(max_size=24))
    bytes_schema = dec(precision, scale)
    check(bytes_schema, fastavro_bytes("bytes", payload))
    size = data.draw(st.integers(0, 4)) + (precision * 3322 // 1000 + 2) // 8 + 1
    fixed = dec(precision, scale, "fixed", name="F", size=size)
    check(fixed, data.draw(st.binary(min_size=size, max_size=size)))


def test_decimal_precision_no_context_takes_is_left_to_fastavro():
    assert compile_reader(dec(0, 0)) is None
    assert compile_reader({"type": "bytes", "logicalType": "decimal"}) is None


def test_arrays_of_nothing_are_left_to_fastavro():
    assert compile_reader({"type": "array", "items": "null"}) is None
    empty = {"type": "record", "name": "E", "fields": []}
    assert compile_reader(record(("a", {"type": "array", "items": empty}))) is None
    assert compile_reader({"type": "array", "items": ["null", "int"]}) is not None


def test_encodings_no_writer_produces():
    # negative block counts (then the block's size), several blocks, overlong varints
    ints = {"type": "array", "items": "int"}
    assert check(ints, b"\x03\x04\x02\x04\x04\x06\x08\x00") == [1, 2, 3, 4]
    assert check({"type": "map", "values": "int"}, b"\x03\x0c\x02a\x02\x02b\x04\x00") == {
        "a": 1,
        "b": 2,
    }
    assert check({"type": "map", "values": "int"}, b"\x04\x02a\x02\x02a\x04\x00") == {"a": 2}
    assert check(["null", "int"], b"\x82\x80\x00\x06") == 3  # index 1 in 3 bytes
    assert check("long", b"\x80\x80\x80\x00") == 0
    enum = {"type": "enum", "name": "E", "symbols": ["a", "b"]}
    assert check(enum, b"\x82\x00") == "b"
    assert check("string", b"\x86\x00abc") == "abc"
    assert check("boolean", b"\x07") is True  # fastavro: anything but 0 is true
    assert check("long", b"\xfe" + b"\xff" * 8 + b"\x01") == 2**63 - 1
    assert check("long", b"\xff" * 9 + b"\x01") == -(2**63)


def test_recursive_records():
    node = {
        "type": "record",
        "name": "Node",
        "fields": [
            {"name": "v", "type": "int"},
            {"name": "kids", "type": {"type": "array", "items": "Node"}},
            {"name": "next", "type": ["null", "Node"]},
        ],
    }
    tree = {"v": 1, "kids": [{"v": 2, "kids": [], "next": None}], "next": None}
    tree["next"] = {"v": 3, "kids": [tree["kids"][0]], "next": None}
    assert check(node, fastavro_bytes(node, tree)) == tree


def test_bytes_like_input_and_schema_text():
    read = compile_reader('["null", "string"]')
    assert read(bytearray(b"\x02\x02x"), 0) == "x"
    assert read(memoryview(b"..\x00")[2:], 0) is None
    assert "def read" in read.source


# --------------------------------------------------------------------------- malformed data

MALFORMED = [
    ("union index out of range", ["null", "int"], b"\x04\x02", "index 2 is out of range"),
    ("negative union index", ["null", "int"], b"\x01\x02", "index -1 is out of range"),
    ("enum index", {"type": "enum", "name": "E", "symbols": ["a"]}, b"\x02", "index 1"),
    ("negative enum index", {"type": "enum", "name": "E", "symbols": ["a"]}, b"\x01", "-1"),
    ("invalid UTF-8", "string", b"\x02\xff", "not UTF-8"),
    ("a surrogate", "string", b"\x06\xed\xa0\x80", "not UTF-8"),
    ("negative length", "bytes", b"\x01abc", "negative length -1"),
    ("negative length, long form", "string", b"\x81\x00", "negative length"),
    ("varint of 11 bytes", "long", b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
    ("varint beyond 64 bits", "long", b"\xff" * 9 + b"\x7f", "beyond 64 bits"),
    ("huge length", "string", b"\xfe\xff\xff\xff\x0fab", "truncated"),
    ("truncated string", ["null", "string"], b"\x02\x08ab", "truncated"),
    ("truncated double", "double", b"\x00" * 7, "truncated"),
    ("truncated fixed", {"type": "fixed", "name": "F", "size": 4}, b"ab", "truncated"),
    ("nothing", "int", b"", "truncated"),
    ("trailing bytes", ["null", "int"], b"\x00\x00\x00", "2 bytes left"),
    ("count beyond the data", {"type": "array", "items": "long"}, b"\xfe\xff\x01\x02", "block"),
    ("endless blocks", {"type": "array", "items": "int"}, b"\x02\x02" * 3, "truncated"),
    ("map key", {"type": "map", "values": "int"}, b"\x02\x03a\x02\x00", "negative length"),
    (
        "index in a record field",
        record(("a", "int"), ("b", ["null", "string"])),
        b"\x02\x06",
        "index 3",
    ),
]


@pytest.mark.parametrize(
    ("schema", "data", "message"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED]
)
def test_malformed(schema, data, message):
    read = compile_reader(schema)
    with pytest.raises(AvroReadError, match=message):
        read(data, 0)
    assert issubclass(AvroReadError, ValueError)


def test_deep_nesting_beyond_pythons_block_limit():
    # Python allows 20 nested loops in a function: deeper parts get functions of their own
    schema, datum = ["null", "int"], 1
    for _ in range(12):
        schema, datum = ["null", {"type": "array", "items": schema}], [datum, None]
    schema = record(("a", schema), ("b", "int"))
    assert check(schema, fastavro_bytes(schema, {"a": datum, "b": 7})) == {"a": datum, "b": 7}


def test_the_decoder_reads_with_the_compiled_reader(stack):
    columns = [c for c, _ in PG_COLUMNS]
    _, schema = record_schemas("public", f"decoded_{uuid.uuid4().hex[:8]}", columns, [])
    registry = SchemaRegistryClient({"url": stack.registry_url})
    schema_id = registry.register_schema(
        f"decoded-{uuid.uuid4()}", Schema(json.dumps(schema), "AVRO")
    )
    decoder = Decoder(registry)
    assert decoder.schema(schema_id).read is not None
    frame = b"\x00" + struct.pack(">I", schema_id)
    encode, write = row_encoder(columns), compile_writer(schema)
    plain = without_logical_types(schema)
    for row in _rows(columns, [t for _, t in PG_COLUMNS])[-3:]:
        body = write(encode(row))
        _, datum = decoder.decode(frame + body)
        assert same(datum, fastavro_read(plain, body)[0])
        with pytest.raises(DecodeError, match=f"schema id {schema_id}: .*bytes left"):
            decoder.decode(frame + body + b"\x00")
        with pytest.raises(DecodeError, match=f"schema id {schema_id}: truncated"):
            decoder.decode(frame + body[:-1])
    with pytest.raises(DecodeError, match="index 2 is out of range"):
        decoder.decode(frame + b"\x04")
