"""The stack's schema registry: ours, or Apicurio Registry (BOTTLER_STACK_REGISTRY=apicurio),
remembered with the stack, which refuses to change it: its topics carry the ids of the registry
it was made with. (tests/test_apicurio.py runs the appliance on Apicurio.)"""

from __future__ import annotations

import json

import pytest

from common.errors import BottlerError
from compose import apicurio
from compose.stack import Stack


def test_the_registry_is_chosen_once_and_kept(tmp_path, monkeypatch):
    monkeypatch.delenv(apicurio.REGISTRY_ENV, raising=False)
    ours = Stack(tmp_path / "ours", {"registry": 18181})
    assert ours.endpoints.registry == "http://127.0.0.1:18181"
    assert ours.registry.marker == "schemas.registry_server"
    ours.root.mkdir()
    ours._save_state()

    monkeypatch.setenv(apicurio.REGISTRY_ENV, "apicurio")
    made = Stack(tmp_path / "apicurio", {"registry": 18182})
    assert made.endpoints.registry == "http://127.0.0.1:18182/apis/ccompat/v7"
    assert made.registry.marker == apicurio.MARKER
    made.root.mkdir()
    made._save_state()
    assert json.loads((made.root / "stack.json").read_text())["registry"] == "apicurio"
    with pytest.raises(BottlerError) as refused:
        Stack(ours.root)
    assert refused.value.message == (f"the stack in {ours.root} was made with the bottler schema "
                                     "registry, not apicurio")
    assert "bottler stack reset" in refused.value.hint

    monkeypatch.delenv(apicurio.REGISTRY_ENV)
    assert Stack(made.root).registry_kind == "apicurio"  # remembered: status, down, restart
    monkeypatch.setenv(apicurio.REGISTRY_ENV, "confluent")
    with pytest.raises(BottlerError, match="BOTTLER_STACK_REGISTRY=confluent is no registry"):
        Stack(tmp_path / "new")


def test_apicurio_runs_on_loopback_with_its_schemas_in_a_file(tmp_path):
    argv = apicurio.ApicurioNode(tmp_path, 18183).argv("java", tmp_path / "quarkus-run.jar")
    assert argv[0] == "java" and argv[-2:] == ["-jar", str(tmp_path / "quarkus-run.jar")]
    assert {"-Dquarkus.http.host=127.0.0.1", "-Dquarkus.http.port=18183",
            "-Dquarkus.management.host=127.0.0.1"} <= set(argv)
    assert f"-Dapicurio.datasource.url=jdbc:h2:file:{tmp_path}/apicurio/registry;" \
           "DB_CLOSE_ON_EXIT=FALSE" in argv  # not in memory: a restart keeps the ids
