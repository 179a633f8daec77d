"""The schema registry end to end: a real registry process on a real broker, driven by
Confluent's own unmodified client, serializer and deserializer."""

import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from schemas.registry_server.compatibility import LEVELS
from tests.support.kafka_node import own_kafka

pytestmark = pytest.mark.stack

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"


def user_schema(*extra: dict, name: str = "User") -> str:
    fields = [{"name": "id", "type": "long"}, {"name": "name", "type": "string"}, *extra]
    return json.dumps({"type": "record", "name": name, "namespace": "test", "fields": fields})


V1 = user_schema()
V2 = user_schema({"name": "email", "type": "string", "default": ""})
BREAKING = user_schema({"name": "age", "type": "int"})  # new field without a default


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def client(stack) -> SchemaRegistryClient:
    """A fresh client each time: its caches must not answer for the server."""
    return SchemaRegistryClient({"url": stack.registry_url})


def sr_error(call, *args, **kwargs) -> SchemaRegistryError:
    with pytest.raises(SchemaRegistryError) as caught:
        call(*args, **kwargs)
    return caught.value


def schema_id_of(payload: bytes) -> int:
    assert payload[0] == 0, "Confluent wire format starts with magic byte 0"
    return int.from_bytes(payload[1:5], "big")


def test_serialized_data_and_ids_survive_a_restart(stack):
    topic = unique("users")
    subject = f"{topic}-value"
    ctx = SerializationContext(topic, MessageField.VALUE)
    first = client(stack)
    old_bytes = AvroSerializer(first, V1)({"id": 1, "name": "ada"}, ctx)
    new_bytes = AvroSerializer(first, V2)({"id": 2, "name": "bob", "email": "b@x"}, ctx)
    id1, id2 = schema_id_of(old_bytes), schema_id_of(new_bytes)
    assert id2 > id1
    first.set_compatibility(subject, "FULL")

    stack.restart("registry")

    after = client(stack)
    assert json.loads(after.get_schema(id1).schema_str) == json.loads(V1)
    assert json.loads(after.get_schema(id2).schema_str) == json.loads(V2)
    latest = after.get_latest_version(subject)
    assert (latest.version, latest.schema_id) == (2, id2)
    found = after.lookup_schema(subject, Schema(V1, "AVRO"))
    assert (found.version, found.schema_id) == (1, id1)
    assert after.get_versions(subject) == [1, 2]
    assert after.get_compatibility(subject) == "FULL"

    deserialize = AvroDeserializer(after)
    assert deserialize(old_bytes, ctx) == {"id": 1, "name": "ada"}
    assert deserialize(new_bytes, ctx) == {"id": 2, "name": "bob", "email": "b@x"}
    # A reader on the newer schema fills the default into data written with the older one.
    assert AvroDeserializer(after, V2)(old_bytes, ctx)["email"] == ""

    # Registering again is idempotent, and new ids continue after the ones read back.
    assert after.register_schema(subject, Schema(V1, "AVRO")) == id1
    assert after.get_versions(subject) == [1, 2]
    id3 = after.register_schema(unique("other"), Schema(user_schema(name="Fresh"), "AVRO"))
    assert id3 > id2


def test_incompatible_schema_is_refused_with_409(stack):
    subject = unique("compat-value")
    sr = client(stack)
    sr.register_schema(subject, Schema(V1, "AVRO"))

    assert sr.test_compatibility(subject, Schema(V2, "AVRO")) is True
    assert sr.test_compatibility(subject, Schema(BREAKING, "AVRO")) is False
    error = sr_error(sr.register_schema, subject, Schema(BREAKING, "AVRO"))
    assert (error.http_status_code, error.error_code) == (409, 409)
    assert "age" in error.error_message
    assert sr.get_versions(subject) == [1]

    verbose = httpx.post(
        f"{stack.registry_url}/compatibility/subjects/{subject}/versions/latest?verbose=true",
        json={"schema": BREAKING},
    ).json()
    assert verbose["is_compatible"] is False
    assert any("reader_field_missing_default_value" in m for m in verbose["messages"])

    # Relaxing the subject's level lets the same schema in.
    assert sr.set_compatibility(subject, "NONE") == {"compatibility": "NONE"}
    sr.register_schema(subject, Schema(BREAKING, "AVRO"))
    assert sr.get_versions(subject) == [1, 2]


def test_unknown_subject_version_and_id(stack):
    sr = client(stack)
    missing = unique("missing-value")
    for call in (sr.get_latest_version, sr.get_versions):
        error = sr_error(call, missing)
        assert (error.http_status_code, error.error_code) == (404, 40401)
    error = sr_error(sr.lookup_schema, missing, Schema(V1, "AVRO"))
    assert error.error_code == 40401

    subject = unique("known-value")
    sr.register_schema(subject, Schema(V1, "AVRO"))
    assert sr_error(sr.get_version, subject, 7).error_code == 40402
    assert sr_error(sr.lookup_schema, subject, Schema(V2, "AVRO")).error_code == 40403
    assert sr_error(sr.get_schema, 2_000_000_000).error_code == 40403


def test_config_get_and_put(stack):
    sr = client(stack)
    url = stack.registry_url
    original = sr.get_compatibility()
    assert original in LEVELS
    try:
        assert sr.set_compatibility(level="FORWARD") == {"compatibility": "FORWARD"}
        assert sr.get_compatibility() == "FORWARD"
    finally:
        sr.set_compatibility(level=original)
    assert sr.get_compatibility() == original

    subject = unique("config-value")
    no_level = httpx.get(f"{url}/config/{subject}").json()
    assert no_level["error_code"] == 40408
    fallback = httpx.get(f"{url}/config/{subject}", params={"defaultToGlobal": "true"}).json()
    assert fallback == {"compatibilityLevel": original}

    sr.set_compatibility(subject, "FULL_TRANSITIVE")
    assert sr.get_compatibility(subject) == "FULL_TRANSITIVE"
    assert httpx.delete(f"{url}/config/{subject}").json() == {
        "compatibilityLevel": "FULL_TRANSITIVE"
    }
    assert httpx.get(f"{url}/config/{subject}").json()["error_code"] == 40408

    invalid = sr_error(sr.set_compatibility, subject, "SIDEWAYS")
    assert (invalid.http_status_code, invalid.error_code) == (422, 42203)


def test_soft_then_permanent_delete(stack):
    sr = client(stack)
    subject = unique("delete-value")
    id1 = sr.register_schema(subject, Schema(V1, "AVRO"))
    sr.register_schema(subject, Schema(V2, "AVRO"))

    assert sr.delete_version(subject, 2) == 2
    assert sr.get_versions(subject) == [1]
    assert sr_error(sr.delete_version, subject, 2).error_code == 40406
    assert sr_error(sr.delete_version, subject, 1, permanent=True).error_code == 40407
    assert sr_error(sr.delete_subject, subject, permanent=True).error_code == 40405

    assert sr.delete_subject(subject) == [1]
    assert subject not in sr.get_subjects()
    assert subject in sr.get_subjects(deleted=True)
    assert sr_error(sr.get_versions, subject).error_code == 40401
    assert sr_error(sr.delete_subject, subject).error_code == 40404
    # Soft-deleted schemas still resolve by id: old messages stay readable.
    assert json.loads(sr.get_schema(id1).schema_str) == json.loads(V1)

    stack.restart("registry")
    sr = client(stack)
    assert subject not in sr.get_subjects()
    assert subject in sr.get_subjects(deleted=True)

    assert sr.delete_subject(subject, permanent=True) == [1, 2]
    assert subject not in sr.get_subjects(deleted=True)
    stack.restart("registry")
    sr = client(stack)
    assert subject not in sr.get_subjects(deleted=True)
    assert sr_error(sr.get_versions, subject).error_code == 40401
    # The subject starts over at version 1.
    sr.register_schema(subject, Schema(V1, "AVRO"))
    assert sr.get_versions(subject) == [1]


def test_same_schema_shares_one_id_across_subjects(stack):
    sr = client(stack)
    a, b = unique("shared-a-value"), unique("shared-b-value")
    schema = user_schema(name="Shared")
    id_a = sr.register_schema(a, Schema(schema, "AVRO"))
    # Same schema, different spacing and key order: still the same schema.
    respaced = json.dumps(dict(reversed(list(json.loads(schema).items()))), indent=2)
    id_b = client(stack).register_schema(b, Schema(respaced, "AVRO"))
    assert id_a == id_b
    assert client(stack).get_versions(b) == [1]
    pairs = {(v.subject, v.version) for v in sr.get_schema_versions(id_a)}
    assert pairs == {(a, 1), (b, 1)}


def test_plain_http_answers_and_errors(stack):
    with httpx.Client(base_url=stack.registry_url) as http:
        root = http.get("/")
        assert root.status_code == 200 and root.json() == {}
        assert root.headers["content-type"].startswith(MEDIA_TYPE)
        assert http.get("/schemas/types").json() == ["AVRO"]

        subject = unique("http-value")
        created = http.post(f"/subjects/{subject}/versions", json={"schema": V1})
        assert created.status_code == 200
        schema_id = created.json()["id"]
        described = http.get(f"/subjects/{subject}/versions/-1").json()
        assert (described["subject"], described["version"]) == (subject, 1)
        assert described["id"] == schema_id
        assert json.loads(described["schema"]) == json.loads(V1)
        raw = http.get(f"/subjects/{subject}/versions/1/schema")
        assert json.loads(raw.text) == json.loads(V1)
        assert http.get(f"/schemas/ids/{schema_id}", params={"subject": subject}).status_code == 200

        for body, words in (
            ({"schema": '{"type": "bogus"}'}, "bogus"),
            ({"schema": V1, "schemaType": "PROTOBUF"}, "not supported"),
            ({"schema": V1, "references": [{"name": "x", "subject": "y", "version": 1}]},
             "not supported"),
        ):
            refused = http.post(f"/subjects/{subject}/versions", json=body)
            assert refused.status_code == 422, body
            assert refused.json()["error_code"] == 42201
            assert words in refused.json()["message"]
        bad_version = http.get(f"/subjects/{subject}/versions/first")
        assert (bad_version.status_code, bad_version.json()["error_code"]) == (422, 42202)
        bad_level = http.put("/config", json={"compatibility": "SIDEWAYS"})
        assert bad_level.json()["error_code"] == 42203


# -- a registry whose broker goes away: needs its own broker, so the shared one stays up ------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"{what} not ready within {timeout:.0f}s")


def spawn(argv: list[str], log: Path) -> subprocess.Popen:
    with log.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # uvicorn shuts down
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_unwritable_store_answers_50001_and_recovers(tmp_path):
    http_port = free_port()
    url = f"http://127.0.0.1:{http_port}"
    with own_kafka() as kafka:  # a broker of its own to stop
        bootstrap = kafka.bootstrap
        registry = spawn([sys.executable, "-m", "schemas.registry_server", "--port", str(http_port),
                          "--kafka", bootstrap], tmp_path / "registry.log")
        try:
            wait_for(lambda: registry.poll() is not None or answers(url), "registry", 60)
            assert registry.poll() is None, (tmp_path / "registry.log").read_text()
            first = httpx.post(f"{url}/subjects/a-value/versions", json={"schema": V1}).json()

            kafka.stop()
            refused = httpx.post(f"{url}/subjects/b-value/versions", json={"schema": V2},
                                 timeout=60)
            assert refused.status_code == 500
            assert refused.json()["error_code"] == 50001
            assert bootstrap in refused.json()["message"]
            assert "Traceback" not in refused.text
            # Reads are still served from memory.
            assert httpx.get(f"{url}/schemas/ids/{first['id']}").status_code == 200

            kafka.start()
            again = httpx.post(f"{url}/subjects/b-value/versions", json={"schema": V2},
                               timeout=60)
            assert again.status_code == 200, again.text
            assert again.json()["id"] == first["id"] + 1
            assert httpx.get(f"{url}/subjects").json() == ["a-value", "b-value"]
        finally:
            stop(registry)


# -- request sizes ---------------------------------------------------------------------------


def test_request_bodies_are_capped_and_an_oversized_schema_is_named(stack):
    subject = unique("big-value")
    url = f"{stack.registry_url}/subjects/{subject}/versions"
    headers = {"content-type": MEDIA_TYPE}

    def refused_as_too_large(reply: httpx.Response) -> str:
        assert reply.status_code == 413, reply.text
        body = reply.json()
        assert body["error_code"] == 413 and set(body) == {"error_code", "message"}
        return body["message"]

    # 60 MB declared: refused before it is read, in Confluent's error shape
    huge = httpx.post(url, content=b" " * 60_000_000, headers=headers, timeout=60)
    assert "larger than this registry accepts" in refused_as_too_large(huge)

    # no declared length (chunked): refused once the reading passes the limit
    def chunks():
        for _ in range(40):
            yield b" " * 65536

    chunked = httpx.post(url, content=chunks(), headers=headers, timeout=60)
    assert "--max-request-bytes" in refused_as_too_large(chunked)

    # a body under the limit whose record is over the topic's limit (every "é" is stored as
    # a 7-byte escape): the schema is named as the cause, not the broker
    doc = "é" * 400_000
    schema = user_schema(name="Big")[:-1] + f', "doc": "{doc}"}}'
    stored = httpx.post(url, content=json.dumps({"schema": schema}, ensure_ascii=False).encode(),
                        headers=headers, timeout=60)
    message = refused_as_too_large(stored)
    assert "schema is too large to store" in message and "broker" not in message
    # nothing was written: the subject does not exist, and the registry still writes
    assert httpx.get(url).status_code == 404
    assert httpx.post(url, json={"schema": V1}).status_code == 200
