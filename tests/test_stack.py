"""The embedded stack answers as the real services do."""

import subprocess

import httpx
import psycopg
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from compose import search_engine


def test_postgres_has_logical_wal(stack):
    with psycopg.connect(stack.pg_dsn) as conn:
        settings = dict(conn.execute(
            "select name, setting from pg_settings where name in "
            "('wal_level', 'max_replication_slots', 'max_wal_senders')"
        ).fetchall())
    assert settings["wal_level"] == "logical"
    assert int(settings["max_replication_slots"]) >= 10
    assert int(settings["max_wal_senders"]) >= 10


def test_postgres_accepts_replication_connections(stack):
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute("select pg_create_logical_replication_slot('stack_probe', 'pgoutput')")
        try:
            slots = [r[0] for r in conn.execute("select slot_name from pg_replication_slots")]
            assert "stack_probe" in slots
        finally:
            conn.execute("select pg_drop_replication_slot('stack_probe')")


def test_broker_creates_lists_and_compacts_topics(stack):
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    topic = "stack-probe-compacted"
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=3, config={"cleanup.policy": "compact"})]
    )
    futures[topic].result(timeout=10)
    producer = Producer({"bootstrap.servers": stack.kafka, "enable.idempotence": True})
    producer.produce(topic, key=b"k", value=b"v")
    assert producer.flush(10) == 0
    metadata = admin.list_topics(timeout=10)
    assert topic in metadata.topics
    assert len(metadata.topics[topic].partitions) == 3
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    config = admin.describe_configs([resource])[resource].result(timeout=10)
    assert config["cleanup.policy"].value == "compact"


def test_search_api_is_opensearch(stack):
    info = httpx.get(stack.search_url + "/").json()
    assert info["version"]["distribution"] == "opensearch"
    assert info["version"]["number"].startswith(f"{search_engine.engine().major}.")


def test_registry_answers(stack):
    response = httpx.get(stack.registry_url + "/subjects")
    assert response.status_code == 200
    assert isinstance(response.json(), list)


def test_env_file_is_sourceable_and_matches_endpoints(stack):
    env_file = stack.stack.env_file
    printed = subprocess.run(
        ["bash", "-c", f'. "{env_file}" && echo "$BOTTLER_PG_DSN|$BOTTLER_KAFKA|'
                       f'$BOTTLER_REGISTRY|$BOTTLER_SEARCH"'],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert printed == "|".join(
        [stack.pg_dsn, stack.kafka, stack.registry_url, stack.search_url]
    )
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"  # it holds the password
