"""When the search engine (OpenSearch, compose/search_engine.py) cannot start, `bottler stack up`
says why in one line and leaves nothing running; its jars come with a launcher compiled by the
JDK's javac, whose absence is one line too (issue 28)."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.errors import BottlerError
from compose import jars
from compose.stack import free_ports
from tests.support.own_stack import nothing_runs, one_error, stack_up

pytestmark = pytest.mark.stack  # `bottler stack up` of a stack of its own


def test_a_missing_jar_is_named(root, tmp_path):
    """A jars directory missing one jar: OpenSearch's stack trace becomes one line."""
    cache = tmp_path / "jars"
    cache.mkdir()
    kafka = jars.fetch("kafka")
    (cache / kafka.name).symlink_to(kafka)
    complete = jars.fetch("opensearch")
    partial = cache / complete.name
    partial.mkdir()
    for entry in complete.iterdir():
        if not entry.name.startswith("opensearch-x-content-"):
            (partial / entry.name).symlink_to(entry)
    done = stack_up(root, free_ports(), BOTTLER_JARS_DIR=str(cache))
    one_error(done, f"OpenSearch's jars in {partial} are incomplete: class org.opensearch.",
              f"rm -r {partial}", "make deps")
    nothing_runs(root)  # PostgreSQL and Kafka, started first, are stopped again


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
