"""Kafka and schema registry client properties reach every process that talks to Kafka or the
registry, and secrets in them stay secret (issue 15).

Every command that talks to Kafka is run with `-C security.protocol=SSL` against the session's
plaintext broker and must stop within seconds with one line naming the property. A second
registry process with basic authentication runs on the session's broker: every process that
reads or writes schemas works through it with the right credentials and stops with one clear
line with wrong ones; the password never shows in output, logs, metrics or `ps`."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

from compose.demo import seed
from compose.procs import free_port
from tests.support.cli import ROOT, assert_clear_error, bottler, clean_env
from tests.support.databases import execute, fresh_database, rows
from tests.support.waiting import wait_for, wait_snapshot_done

pytestmark = pytest.mark.stack

USER = "bottler"
TRANSLATOR = "materializers.translators.examples.orders:translator"


@pytest.fixture(scope="module")
def auth_registry(stack, tmp_path_factory):
    """A second registry on the session's broker, with basic authentication (users file), its
    schemas in a topic of its own."""
    password = "Sr" + secrets.token_hex(12)
    users = tmp_path_factory.mktemp("registry") / "users"
    users.write_text(f"# the registry's users\n{USER}:{password}\n")
    users.chmod(0o600)
    port = free_port()
    log = users.parent / "registry.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "bottler", "registry", "serve", "--port", str(port),
             "--broker", stack.kafka, "--topic", f"_schemas-auth-{uuid.uuid4().hex[:8]}",
             "--users-file", str(users)],
            cwd=ROOT, env=clean_env(), stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert process.poll() is None, log.read_text()
        try:
            return httpx.get(f"{url}/subjects", timeout=1).status_code == 401
        except httpx.HTTPError:
            return False

    wait_for(answers, 60, "the authenticating registry")
    yield {"url": url, "password": password, "process": process, "log": log}
    process.terminate()
    process.wait(30)
    assert password not in log.read_text()


def credentials(registry: dict, password: str | None = None) -> dict[str, str]:
    """The environment that gives a process the registry and its credentials."""
    info = f"{USER}:{password or registry['password']}"
    return {"BOTTLER_REGISTRY": registry["url"],
            "BOTTLER_REGISTRY_CONFIG": json.dumps({"basic.auth.user.info": info})}


# -- the registry itself ---------------------------------------------------------------------

def test_confluent_client_with_basic_auth_registers_reads_and_gets_the_mode(auth_registry):
    conf = {"url": auth_registry["url"],
            "basic.auth.user.info": f"{USER}:{auth_registry['password']}"}
    client = SchemaRegistryClient(conf)
    subject = f"auth-{uuid.uuid4().hex[:8]}-value"
    schema = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
    schema_id = client.register_schema(subject, Schema(schema, "AVRO"))
    assert json.loads(SchemaRegistryClient(conf).get_schema(schema_id).schema_str)["name"] == "R"
    assert SchemaRegistryClient(conf).get_latest_version(subject).schema_id == schema_id
    assert client.get_global_mode() == "READWRITE"
    assert client.update_global_mode("READWRITE") == "READWRITE"
    assert client.get_contexts() == ["."]
    with pytest.raises(SchemaRegistryError) as no_subject_mode:
        client.get_mode(subject)
    assert (no_subject_mode.value.http_status_code, no_subject_mode.value.error_code) == (
        404, 40409)
    with pytest.raises(SchemaRegistryError) as readonly:
        client.update_global_mode("READONLY")
    assert readonly.value.error_code == 42204
    for info in (None, f"{USER}:wrong", f"nobody:{auth_registry['password']}"):
        wrong = {"url": auth_registry["url"]} | ({"basic.auth.user.info": info} if info else {})
        with pytest.raises(SchemaRegistryError) as refused:
            SchemaRegistryClient(wrong).get_subjects()
        assert (refused.value.http_status_code, refused.value.error_code) == (401, 401)
    answer = httpx.get(f"{auth_registry['url']}/mode")
    assert answer.status_code == 401 and answer.json() == {"error_code": 401,
                                                           "message": "Unauthorized"}
    assert answer.headers["www-authenticate"].startswith("Basic")


def test_users_from_the_environment_and_a_bad_users_file(stack, tmp_path):
    from common.config import load
    from schemas.registry_server.auth import load_users
    from schemas.registry_server.settings import ServeSettings

    os.environ["BOTTLER_REGISTRY_USERS"] = "a:Pw1xq\nb:Pw2xq"
    try:
        s = load(ServeSettings, {})
    finally:
        del os.environ["BOTTLER_REGISTRY_USERS"]
    assert load_users(s.users_file, s.users.get_secret_value()) == {"a": "Pw1xq", "b": "Pw2xq"}
    assert "Pw1xq" not in repr(s)
    bad = tmp_path / "users"
    bad.write_text("no-colon-here\n")
    assert_clear_error(bottler("registry", "serve", "--broker", stack.kafka, "--port",
                               str(free_port()), "--users-file", str(bad)),
                       "line 1", "user:password")


# -- Kafka client properties reach every process -----------------------------------------------

def kafka_commands(stack, source: str, tmp_path: Path) -> dict[str, list[str]]:
    """Every command that talks to Kafka, ready to run against the session's services."""
    target = source  # any database: the broker is checked before it is used
    return {
        "capture": ["capture", "-d", source, "-s", "ssl_probe", "-p", "sslprobe"],
        "materialize postgres": ["materialize", "postgres", "-t", target, "--once"],
        "materialize search": ["materialize", "search", "--index", "probe", "--once"],
        "materialize warehouse": ["materialize", "warehouse", "--path", str(tmp_path / "wh"),
                                  "--once"],
        "reindex": ["reindex", "probe", "--timeout", "5"],
        "reindex --status": ["reindex", "probe", "--status"],
        "translate": ["translate", TRANSLATOR, "--once"],
        "migrate status": ["migrate", "status", "-s", source, "-t", target],
        "registry serve": ["registry", "serve", "--port", str(free_port())],
    }


KAFKA_COMMANDS = ["capture", "materialize postgres", "materialize search",
                  "materialize warehouse", "reindex", "reindex --status", "translate",
                  "migrate status", "registry serve"]


@pytest.mark.parametrize("command", KAFKA_COMMANDS)
def test_kafka_properties_reach_the_clients(stack, source, tmp_path, command):
    """`-C security.protocol=SSL` against the plaintext broker: one line naming the property,
    within seconds; the secret property beside it is masked and draws a warning."""
    args = kafka_commands(stack, source, tmp_path)[command]
    secret = "Kp" + secrets.token_hex(8)
    env = {"BOTTLER_KAFKA": stack.kafka, "BOTTLER_REGISTRY": stack.registry_url,
           "BOTTLER_KAFKA_CONFIG": json.dumps({"ssl.key.password": secret})}
    started = time.monotonic()
    proc = bottler(*args, "-C", "security.protocol=SSL", env=env, timeout=60)
    assert time.monotonic() - started < 30, "not a fast failure"
    text = assert_clear_error(proc, "security.protocol=SSL", stack.kafka, "ssl.key.password=***",
                              secrets=(secret,))
    assert "unreachable" in text


def test_status_shows_the_property_that_fails(stack):
    secret = "Kp" + secrets.token_hex(8)
    proc = bottler("status", "--once", "-b", stack.kafka, "-C", "security.protocol=SSL",
                   env={"BOTTLER_KAFKA_CONFIG": json.dumps({"sasl.password": secret})},
                   timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "security.protocol=SSL" in proc.stdout and secret not in proc.stdout + proc.stderr


def test_an_unknown_property_is_refused_before_anything_starts(stack):
    for flag, prop, hint in (("-C", "no.such.property=1", "librdkafka"),
                             ("-R", "no.such.property=1", "SchemaRegistryClient")):
        proc = bottler("materialize", "postgres", "-t", "postgresql://x@127.0.0.1:1/x",
                       flag, prop)
        assert_clear_error(proc, flag, "no.such.property", hint)


def test_the_config_file_carries_the_properties_and_flags_win(stack, tmp_path):
    """The `kafka:` section reaches the clients; -C overrides one property and keeps the rest;
    a file of another command's keys is read, a typo is refused."""
    config = tmp_path / "bottler.yaml"
    config.write_text(f"broker: {stack.kafka}\nslot: other_commands_key\nkafka:\n"
                      "  security.protocol: SSL\n  client.id: from-the-file\n")
    proc = bottler("migrate", "status", "-s", "postgresql://x@127.0.0.1:1/x",
                   "-t", "postgresql://x@127.0.0.1:1/x", "--config", str(config))
    assert_clear_error(proc, "security.protocol=SSL", "client.id=from-the-file")
    proc = bottler("migrate", "status", "-s", "postgresql://x@127.0.0.1:1/x",
                   "-t", "postgresql://x@127.0.0.1:1/x", "--config", str(config),
                   "-C", "security.protocol=PLAINTEXT", "-C", "client.id=from-the-flag")
    assert_clear_error(proc, "cannot connect to PostgreSQL")  # Kafka passed: the flag won
    config.write_text("brokr: x\n")
    assert_clear_error(bottler("migrate", "status", "--config", str(config)),
                       "brokr", "unknown setting")


# -- registry credentials reach every process ------------------------------------------------

REGISTRY_COMMANDS = ["capture", "materialize postgres", "materialize search",
                     "materialize warehouse", "reindex", "translate"]


@pytest.mark.parametrize("command", REGISTRY_COMMANDS)
def test_wrong_registry_credentials_give_one_clear_line(stack, source, tmp_path, auth_registry,
                                                         command):
    wrong = "Wrong" + secrets.token_hex(6)
    args = kafka_commands(stack, source, tmp_path)[command]
    env = {"BOTTLER_KAFKA": stack.kafka, **credentials(auth_registry, wrong)}
    proc = bottler(*args, env=env, timeout=60)
    assert_clear_error(proc, "refused the credentials", "401", auth_registry["url"],
                       "basic.auth.user.info", secrets=(wrong,))


def test_every_process_works_through_the_authenticating_registry(stack, source, tmp_path,
                                                                  auth_registry):
    """capture → replica, search index, reindex, warehouse and translator, each with the
    credentials from the environment; none shows the password in output, logs, metrics or its
    command line."""
    password = auth_registry["password"]
    prefix = f"a{uuid.uuid4().hex[:8]}"
    seed(source)  # the demo shop: the translator's orders among its tables
    execute(source, "create table probe (id int primary key, v text)",
            "insert into probe select g, 'v' || g from generate_series(1, 50) g")
    env = {"BOTTLER_KAFKA": stack.kafka, **credentials(auth_registry), "BOTTLER_PG_DSN": source}
    metrics_port = free_port()
    log = tmp_path / "capture.log"
    with open(log, "wb") as out:
        capture = subprocess.Popen(
            [sys.executable, "-m", "bottler", "capture", "-s", prefix, "-p", prefix,
             "--metrics-port", str(metrics_port)],
            cwd=ROOT, env=clean_env(**env), stdout=out, stderr=subprocess.STDOUT)
    with fresh_database(stack.pg_dsn) as target:
        try:
            _through_the_registry(stack, source, target, tmp_path, capture, log, metrics_port,
                                  prefix, env, password)
        finally:
            capture.terminate()
            capture.wait(30)
    output = log.read_text()
    assert password not in output
    assert "Traceback" not in output


def _through_the_registry(stack, source, target, tmp_path, capture, log, metrics_port, prefix,
                          env, password) -> None:
    wait_snapshot_done(capture, log, metrics_port, 120)
    metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics").text
    argv = Path(f"/proc/{capture.pid}/cmdline").read_bytes().decode(errors="replace")
    assert password not in metrics and password not in argv

    with_prefix = ["--topic-prefix", prefix]
    runs = {
        "replica": ["materialize", "postgres", "-t", target, "-g", f"{prefix}-replica",
                    "--topic", f"{prefix}.probe", "--once", *with_prefix],
        "search": ["materialize", "search", "--index", f"{prefix}-probe", "--topic",
                   f"{prefix}.probe", "--once", *with_prefix],
        "reindex": ["reindex", f"{prefix}-probe", "--topic", f"{prefix}.probe",
                    "--timeout", "60", *with_prefix],
        "translate": ["translate", TRANSLATOR, "--once", *with_prefix],
        "warehouse": ["materialize", "warehouse", "--path", str(tmp_path / "wh"), "--topic",
                      f"{prefix}.probe", "--once", *with_prefix],
    }
    search = {"BOTTLER_SEARCH": stack.search_url}
    for name, args in runs.items():
        proc = bottler(*args, env={**env, **search}, timeout=300)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{name}:\n{output[-3000:]}"
        assert password not in output, name
        if name == "warehouse":
            assert "50 changes" in proc.stdout, proc.stdout
    assert rows(target, "select count(*) from probe") == [(50,)]
    count = httpx.get(f"{stack.search_url}/{prefix}-probe/_count").json()["count"]
    assert count == 50
