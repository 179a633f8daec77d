"""A registry nobody here wrote: Apicurio Registry 3 as the stack's schema registry
(BOTTLER_STACK_REGISTRY=apicurio, compose/apicurio.py), through its Confluent-compatible API. The
capture and every view run against it and each view ends equal to the source; a JVM consumer
with Apicurio's own Avro deserializer, set for Confluent's framing, reads the topics; the capture
lets an incompatible schema through and leaves the subject's level as it found it, where
Apicurio answers otherwise than Confluent (docs/operations.md, "Another schema registry")."""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from capture.publish.registrar import Registrar
from compose import apicurio, jars
from compose.stack import isolated_stack
from tests.faults.views import VIEWS, source_rows
from tests.support.databases import execute, rows
from tests.support.waiting import wait_for

# a stack of its own, with Apicurio for its registry (`make test-apicurio` runs it alone)
pytestmark = [pytest.mark.stack, pytest.mark.apicurio]

APPS = ("capture", "replica", "search", "warehouse", "translator")
CONSUMER = Path(__file__).parent / "support" / "java" / "ApicurioConsumer.java"


@contextmanager
def environment(name: str, value: str):
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name)
        else:
            os.environ[name] = before


@pytest.fixture(scope="module")
def apicurio_stack():
    with environment(apicurio.REGISTRY_ENV, "apicurio"), isolated_stack() as running:
        assert running.endpoints.registry.endswith(apicurio.CCOMPAT)
        running.up(apps=APPS, demo=True)
        yield running


def wait_views_equal(stack) -> None:
    def equal() -> bool:
        try:
            return all(check(stack).equal for check in VIEWS.values())
        except Exception:  # noqa: BLE001 - a view not made yet (an index, a Delta table)
            return False

    wait_for(equal, 300, "every view to equal the source")


@pytest.mark.timeout(600)
def test_the_capture_and_every_view_run_on_apicurio_and_end_equal_to_the_source(
        apicurio_stack):
    stack = apicurio_stack
    dsn = stack.endpoints.pg_dsn
    order = rows(dsn, "insert into orders (customer_id) values (1) returning id")[0][0]
    execute(dsn, f"update orders set status = 'paid' where id = {order}",
            "update products set price = price + 1 where id <= 20",
            "delete from order_items where order_id = 2")
    wait_views_equal(stack)
    subjects = httpx.get(f"{stack.endpoints.registry}/subjects").json()
    assert {"orders-key", "orders-value", "order-events-value"} <= set(subjects)


def test_a_jvm_consumer_reads_the_topics_with_apicurios_deserializer(apicurio_stack, tmp_path):
    stack = apicurio_stack
    wait_views_equal(stack)  # so the topics hold every change
    expected = source_rows(stack, "orders")  # (id,) -> (status, total, customer_id)
    classpath = jars.classpath("apicurio-serde")
    done = subprocess.run([jars.javac(), "-nowarn", "-d", str(tmp_path),
                           "-cp", classpath, str(CONSUMER)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    native = stack.endpoints.registry.removesuffix(apicurio.CCOMPAT) + "/apis/registry/v3"
    done = subprocess.run(
        [jars.java(), "-cp", f"{classpath}:{tmp_path}", "ApicurioConsumer",
         stack.endpoints.kafka, native, "orders", "status", "customer_id"],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    last = {}
    for line in done.stdout.splitlines():
        key, status, customer = line.split("\t")
        last[(int(key),)] = None if status == "null" else (status, int(customer))
    read = {k: v for k, v in last.items() if v is not None}
    assert read == {k: (status, customer) for k, (status, _, customer) in expected.items()}


def test_an_incompatible_schema_goes_through_and_each_subject_keeps_its_level(apicurio_stack):
    """Apicurio answers NONE for the level of a subject that has none of its own, whatever the
    global level, and keeps a NONE level it is asked to delete: the capture's registrar still
    leaves each subject's level as it found it (Apicurio's own API shows its rules)."""
    url = apicurio_stack.endpoints.registry
    rules = url.removesuffix(apicurio.CCOMPAT) + "/apis/registry/v3/groups/default/artifacts"
    registrar = Registrar(url)
    registrar.client.set_compatibility(level="BACKWARD")  # as a Confluent user would have it
    record = {"type": "record", "name": "t", "fields": [{"name": "a", "type": "int"}]}
    changed = {**record, "fields": [{"name": "a", "type": "string"}]}
    try:
        registrar.client.set_compatibility("own-value", "FULL")
        for subject in ("global-value", "own-value"):
            first = registrar.register(subject, record)
            assert Registrar(url).register(subject, changed) != first  # let through
            assert registrar.client.get_versions(subject) == [1, 2]
        assert registrar.client.get_compatibility("global-value") == "NONE"  # none of its own
        assert httpx.get(f"{rules}/global-value/rules").json() == []
        assert httpx.get(f"{rules}/own-value/rules/COMPATIBILITY").json()["config"] == "FULL"
        # the same schema under another subject has the same id: ids are by content
        assert Registrar(url).register("other-value", changed) == registrar.register(
            "own-value", changed)
    finally:
        registrar.client.delete_config()
    assert json.loads(registrar.client.get_latest_version("global-value").schema.schema_str
                      )["fields"][0]["type"] == "string"
