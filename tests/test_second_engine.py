"""The search suite against the second engine (issue 28): the stack runs OpenSearch 2, and the
search client claims OpenSearch 3 too, so `make test` runs the search modules again on a stack
of their own with ``BOTTLER_STACK_SEARCH_ENGINE=opensearch3``, in a pytest of their own (one
session's services are one engine's). OpenSearch 3 needs Java 21 or newer: ``JAVA25_HOME``
(the Makefile's, Temurin 25 where the machines have it), else ``JAVA_HOME`` if new enough.
``make test-opensearch3`` runs this module alone."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compose import jars

pytestmark = pytest.mark.stack  # it starts a whole stack, in its child pytest

ROOT = Path(__file__).resolve().parents[1]
SUITE = ["tests/test_search.py", "tests/test_search_ownership.py",
         "tests/test_search_reindex.py", "tests/test_search_pressure.py",
         "tests/test_conformance.py", "-k", "search"]
JAVA25_HOME = "/usr/lib/jvm/temurin-25-jdk-amd64"


def _java21_home() -> str | None:
    for home in (os.environ.get("JAVA25_HOME", JAVA25_HOME), os.environ.get("JAVA_HOME")):
        if home and (Path(home) / "bin" / "javac").exists():
            shown = subprocess.run([str(Path(home) / "bin" / "java"), "-version"],
                                   capture_output=True, text=True).stderr
            if (jars.java_major(shown) or 0) >= 21:
                return home
    return None


CHILD_TIMEOUT = 1800  # a whole search suite, on a stack of its own: 4-6 minutes on a busy machine


# Above the child's own timeout: pytest-timeout's signal, raised inside subprocess.run's wait,
# can leave the Popen's wait lock taken, and the worker then hangs on the child it cannot reap
@pytest.mark.timeout(CHILD_TIMEOUT + 120)
def test_the_search_suite_passes_on_opensearch_3(tmp_path):
    home = _java21_home()
    if home is None:
        pytest.skip("OpenSearch 3 needs a JDK 21 or newer: set JAVA25_HOME to one")
    env = {**os.environ, "JAVA_HOME": home, "BOTTLER_STACK_SEARCH_ENGINE": "opensearch3",
           "PYTHONPATH": str(ROOT)}
    for own in ("PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS", "BOTTLER_TEST_CPU_LOG"):
        env.pop(own, None)  # the child is a session of its own
    log = tmp_path / "opensearch3.log"
    with log.open("w") as out:
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
             "-q", "-rfE", *SUITE], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
            timeout=CHILD_TIMEOUT)
    lines = log.read_text().splitlines()
    summary = [line for line in lines if " passed" in line or " failed" in line]
    assert done.returncode == 0, "\n".join(lines[-60:])
    assert summary and "passed" in summary[-1] and "failed" not in summary[-1], summary
