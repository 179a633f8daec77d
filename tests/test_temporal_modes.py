"""--temporal-mode: `logical` (Avro logical types) and `plain` (the same ints, annotated with
connect.name). What confluent-kafka's own AvroDeserializer does with each on the values
Python's datetime cannot hold, and that the views' decoder reads both alike."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from capture.settings import load_settings
from common.errors import BottlerError
from materializers.core.decode import Decoder
from schemas.avro_schema import record_schemas, row_encoder
from schemas.pgtypes import Column, PgType
from schemas.serde import AvroEncoder
from schemas.temporal import CONNECT_NAMES, logical_temporal, plain_temporal


def T(name: str, category: str = "D") -> PgType:
    return PgType(0, name, "pg_catalog", "b", category)


INT4 = T("int4", "N")
COLUMNS = [
    Column("id", INT4, not_null=True),
    Column("d", T("date")),
    Column("ts", T("timestamp")),
    Column("tstz", T("timestamptz")),
    Column("t", T("time")),
    Column("ds", PgType(0, "_date", "pg_catalog", "b", "A", element=T("date")), ndims=1),
    Column("n", T("numeric", "N"), typmod=(10 << 16 | 2) + 4),
]
# what Python's datetime cannot hold, in every temporal column
EXTREMES = ["1", "infinity", "0044-03-15 12:00:00 BC", "10000-01-01 00:00:00+00", "24:00:00",
            "{-infinity,0001-01-01 BC}", "1.50"]
ORDINARY = ["2", "2024-02-29", "2024-06-01 12:00:00", "2024-06-01 12:00:00+00", "13:14:15",
            "{2024-01-01}", "0.01"]


def test_plain_replaces_each_date_time_logical_type_by_its_connect_name():
    _, logical = record_schemas("public", "t", COLUMNS, [])
    key, plain = record_schemas("public", "t", COLUMNS, ["id"], temporal_mode="plain")
    fields = {f["name"]: f["type"][1] for f in plain["fields"]}
    assert fields["d"] == {"type": "int", "connect.name": "org.apache.kafka.connect.data.Date"}
    assert fields["ts"]["connect.name"] == "bottler.time.LocalMicroTimestamp"
    assert fields["tstz"]["connect.name"] == "bottler.time.MicroTimestamp"
    assert fields["t"]["connect.name"] == "bottler.time.MicroTime"
    assert fields["ds"]["items"][1]["connect.name"] == CONNECT_NAMES["date"]
    assert fields["n"]["logicalType"] == "decimal"  # decimals keep theirs
    assert "logicalType" not in str({k: v for k, v in fields.items() if k != "n"})
    assert key["fields"][0]["type"] == "int"
    assert plain_temporal(logical) == plain and logical_temporal(plain) == logical
    with pytest.raises(BottlerError, match="temporal-mode"):
        load_settings(postgres="postgresql://x/y", temporal_mode="iso")
    assert load_settings(postgres="postgresql://x/y").temporal_mode == "logical"


@pytest.mark.stack
def test_confluent_deserializer_reads_every_value_in_plain_mode_only(stack):
    registry = SchemaRegistryClient({"url": stack.registry_url})
    deserialize = AvroDeserializer(registry)
    decoder = Decoder(stack.registry_url)
    encode = row_encoder(COLUMNS)
    decoded_by_view = {}
    for mode in ("logical", "plain"):
        topic = f"temporal_{mode}_{uuid.uuid4().hex[:8]}"
        _, schema = record_schemas("public", "t", COLUMNS, [], temporal_mode=mode)
        schema_id = registry.register_schema(f"{topic}-value", Schema(json.dumps(schema), "AVRO"))
        writer = AvroEncoder(schema_id, schema)
        extreme, ordinary = writer.encode(encode(EXTREMES)), writer.encode(encode(ORDINARY))
        ctx = SerializationContext(topic, MessageField.VALUE)
        assert deserialize(ordinary, ctx)["id"] == 2
        if mode == "logical":
            # today's default: fastavro's logical types stop at datetime's range
            with pytest.raises((OverflowError, ValueError)):
                deserialize(extreme, ctx)
        else:
            row = deserialize(extreme, ctx)
            assert row["d"] == 2**31 - 1 and row["t"] == 86_400_000_000
            assert row["ds"] == [-(2**31), -719528]
        # the views: the same schema and the same values whatever the mode
        written, datum = decoder.decode(extreme)
        decoded_by_view[mode] = (written.schema["fields"], datum)
    assert decoded_by_view["logical"] == decoded_by_view["plain"]
