"""When Kafka cannot start, `bottler stack up` says why in one line, with what to do, and leaves
nothing running: no Java or an old one, jars that cannot be fetched or are incomplete, the port
taken, a data directory of another cluster, a broker that never becomes ready (issue 24)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from common.errors import BottlerError
from compose import jars, services
from compose.kafka import KafkaNode, new_cluster_id
from compose.procs import free_port
from compose.stack import Stack, free_ports
from tests.support.own_stack import nothing_runs, one_error, stack_up

pytestmark = pytest.mark.stack  # `bottler stack up` of a stack of its own


def format_storage(root: Path, ports: dict[str, int]) -> Stack:
    """A stack whose Kafka storage is formatted, as its first start leaves it."""
    stack = Stack(root, ports)
    root.mkdir(parents=True)
    stack._save_state()
    KafkaNode(root, ports["kafka"], ports["kafka_controller"], stack.cluster_id).prepare()
    return stack


def test_java_missing_is_one_line_and_nothing_starts(root, tmp_path):
    ports = free_ports()
    done = stack_up(root, ports, JAVA_HOME=str(tmp_path / "no-jdk"))
    one_error(done, "Java 17 or newer is needed to run Kafka and OpenSearch; none was found at "
              "JAVA_HOME",
              "install a JDK 17")
    nothing_runs(root)
    assert not (root / "pg").exists()  # refused before PostgreSQL was even created


def test_no_java_on_path(monkeypatch, tmp_path):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BottlerError) as refused:
        jars.java()
    assert "none was found on PATH" in refused.value.message
    assert "openjdk-17" in refused.value.hint


def test_java_too_old(root, tmp_path):
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    fake.chmod(0o755)
    done = stack_up(root, free_ports(), JAVA_HOME=None,
                    PATH=f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    one_error(done, f"{fake} is Java 11; Kafka and OpenSearch need Java 17 or newer",
              "install a JDK 17")
    nothing_runs(root)


def test_maven_central_unreachable(tmp_path):
    home, cache = tmp_path / "home", tmp_path / "jars"
    (home / ".m2").mkdir(parents=True)
    cache.mkdir()
    (home / ".m2" / "settings.xml").write_text(
        "<settings><mirrors><mirror><id>nowhere</id><mirrorOf>*</mirrorOf>"
        "<url>http://127.0.0.1:1/</url></mirror></mirrors></settings>")
    env = {**os.environ, "HOME": str(home), "BOTTLER_JARS_DIR": str(cache),
           # Java takes its user.home from the password database, not $HOME
           "MAVEN_OPTS": f"-Duser.home={home}"}
    done = subprocess.run([sys.executable, "-m", "compose.jars", "kafka"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    error = [line for line in done.stderr.splitlines() if not line.startswith("fetching")]
    assert error[0].startswith("error: could not fetch the kafka jars from Maven Central: ")
    assert "127.0.0.1:1" in error[0]  # Maven's own reason
    assert "then run `make deps` again" in error[1]
    assert len(error) == 2
    assert list(cache.iterdir()) == []  # no half-copied directory


@pytest.mark.parametrize("formatted", [False, True], ids=["at-format", "at-start"])
def test_missing_jar_is_named(root, tmp_path, formatted):
    """A jars directory missing one jar: the JVM's screenful of stack trace becomes one line,
    whether the storage tool (a first start) or the broker itself (a later one) finds out."""
    ports = free_ports()
    if formatted:
        format_storage(root, ports)
    complete = jars.fetch("kafka")
    cache = tmp_path / "jars"
    partial = cache / complete.name
    partial.mkdir(parents=True)
    for jar in complete.glob("*.jar"):
        if not jar.name.startswith("kafka-raft-"):
            (partial / jar.name).symlink_to(jar)
    done = stack_up(root, ports, BOTTLER_JARS_DIR=str(cache))
    one_error(done, f"Kafka's jars in {partial} are incomplete: class org.apache.kafka.raft.",
              f"rm -r {partial}", "make deps")
    nothing_runs(root)  # PostgreSQL, started first, is stopped again
    log = (root / "logs" / "broker.log")
    assert formatted == (log.exists() and "NoClassDefFoundError" in log.read_text())


def test_broker_port_taken(root):
    ports = free_ports()
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports["kafka"]))
        held.listen()
        done = stack_up(root, ports)
    one_error(done, f"port {ports['kafka']} (kafka) is already in use on 127.0.0.1",
              "--kafka-port")
    nothing_runs(root)
    assert not (root / "pg").exists()


def test_data_directory_of_another_cluster(root):
    ports = free_ports()
    stack = format_storage(root, ports)
    meta = (root / "kafka" / "data" / "meta.properties").read_text()
    state = json.loads(stack.state_file.read_text())
    state["kafka_cluster_id"] = other = new_cluster_id()
    stack.state_file.write_text(json.dumps(state))

    done = stack_up(root, ports)
    one_error(done, f"was formatted for cluster {stack.cluster_id}, not this stack's ({other})",
              "move that directory away, or `bottler stack reset`")
    nothing_runs(root)
    assert (root / "kafka" / "data" / "meta.properties").read_text() == meta  # untouched


def test_broker_that_never_becomes_ready(tmp_path):
    """A broker-only node whose controller never answers: it runs, but never registers."""
    port, controller = free_port(), free_port()
    node = KafkaNode(tmp_path, port, controller, new_cluster_id(), settings={
        "process.roles": "broker", "node.id": "2",
        "listeners": f"PLAINTEXT://127.0.0.1:{port}"})
    broker = replace(services.broker(tmp_path, port, controller, node.cluster_id),
                     prepare=node.prepare, check=node.check, start_timeout=20)
    with pytest.raises(BottlerError) as refused:
        broker.start()
    assert refused.value.message.startswith("broker did not become ready within 20s: ")
    # Kafka's own word for it: the warning that the controller does not answer
    assert f"Connection to node 1 (/127.0.0.1:{controller}) could not be established" \
        in refused.value.message
    assert "\n" not in refused.value.message
    assert refused.value.hint == f"see {broker.log}"
    assert broker.running_pid() is None
    assert broker.stop() == 0  # nothing of it was left running
