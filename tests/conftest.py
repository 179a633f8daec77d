"""Test session harness: an isolated embedded stack of real services on free ports, started
once per session and torn down at its end (every process stopped, every file removed); the
fixtures live in tests/support, registered here. Every test that starts a service is marked
`stack`, so `pytest -m "not stack"` runs the pure tests alone: those whose fixtures reach a
service fixture are marked here, modules that start services of their own carry the mark, and a
pure test that starts one anyway fails (_services_refused)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.matrix import PG_MATRIX

pytest_plugins = [
    "tests.support.stack",
    "tests.support.databases",
    "tests.support.capture",
    "tests.support.spark",
    "tests.support.own_stack",
    "tests.support.search_api",
    "tests.support.cpu_log",
]

# The stacks' JVMs (broker, search engine) with the client compiler only: a node's start costs
# half the CPU (OpenSearch 5 s against 10, ready in 8 s against 16; Kafka 2.7 s against 3.7),
# and the tests' traffic is light. Not for `make up` or `make bench` (docs/stack.md).
os.environ.setdefault("BOTTLER_STACK_JVM_OPTIONS", "-XX:TieredStopAtLevel=1")

# The fixtures that start a service (or hold one the session started): a test that uses one,
# directly or through another fixture, is marked `stack`.
SERVICE_FIXTURES = frozenset({"stack", "other_postgres", "spark", "spark_native",
                              "stack_dir"})  # test_stack_stops: a stack of its own

# What a pure test may not start: the services' programs, and a stack of the command line's.
SERVICE_PROGRAMS = frozenset({"java", "postgres", "pg_ctl", "initdb", "spark-submit",
                              "spark-class", "kafka-server-start.sh", "opensearch"})


def pytest_generate_tests(metafunc):
    """A `pg_matrix` test runs once per major of PG_MATRIX (ids pg15, pg18; the other majors'
    runs are also marked `pg_other`, so `-m "not pg_other"` runs one major only), unless
    marked `pg_single` (a slow one whose kind the others check on both)."""
    definition = metafunc.definition
    if not definition.get_closest_marker("pg_matrix") or definition.get_closest_marker(
            "pg_single"):
        return
    main = os.environ.get("BOTTLER_TEST_PG_VERSION") or PG_MATRIX[0]
    params = [pytest.param(major, id=f"pg{major}",
                           marks=() if major == main else pytest.mark.pg_other)
              for major in PG_MATRIX]
    metafunc.parametrize("pg_major", params, indirect=True)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by the marks
def pytest_collection_modifyitems(items):
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if SERVICE_FIXTURES.intersection(getattr(item, "fixturenames", ())) or params.get(
                "pg_major"):  # a matrix test's major: its server is the stack's or another
            item.add_marker(pytest.mark.stack)
    _pure_modules_last(items)


# The modules that take longest, longest first (wall time with two workers, measured with
# BOTTLER_TEST_CPU_LOG at 58cf424): `make test` starts them first, so that no worker is left
# running a long one at the end while the other idles. A stale entry costs only time.
SLOW_MODULES = ("test_second_engine", "test_warehouse_cluster", "test_apicurio",
                "test_stack_lifecycle", "test_stack_stops",
                "test_client_properties", "test_secured_broker", "test_core_behaviour",
                "test_faults", "test_warehouse_cli", "test_warehouse_spark_route",
                "test_appliance", "test_warehouse_job", "test_conformance",
                "test_warehouse_connect", "test_scale_out",
                "test_cutover", "test_capture_errors", "test_stack_supervision",
                "test_replica_ownership", "test_search_pressure", "test_stack_search_errors")


def _pure_modules_last(items: list) -> None:
    """The slow modules first (SLOW_MODULES), the other modules with a service test next, those
    of pure tests last, each module's tests together and in order: `make test` hands whole
    modules to its workers in this order (pytest-xdist, --dist loadfile
    --no-loadscope-reorder; xdist's own order is by number of tests, which put the long
    one-test modules last), and the short pure modules fill the end of the run."""
    with_services = {item.path for item in items if item.get_closest_marker("stack")}
    first = {}
    for index, item in enumerate(items):
        first.setdefault(item.path, index)

    def rank(item) -> tuple[int, int, int]:
        slow = SLOW_MODULES.index(item.path.stem) if item.path.stem in SLOW_MODULES else len(
            SLOW_MODULES)
        return item.path not in with_services, slow, first[item.path]

    items.sort(key=rank)


def _starts_a_service(argv) -> bool:
    args = [str(a) for a in ([argv] if isinstance(argv, str | bytes | os.PathLike) else argv)]
    if not args:
        return False
    words = args[0].split() if len(args) == 1 else args  # a shell command line
    if Path(words[0]).name in SERVICE_PROGRAMS:
        return True
    return "bottler" in words and "stack" in words and ("up" in words or "restart" in words)


@contextmanager
def _services_refused(item) -> Iterator[None]:
    """A test not marked `stack` that starts a service fails at once: `-m "not stack"` then
    truly runs pure tests only, and a test that needs a service says so. (Not in teardowns:
    the session's services stop in the last test's, whichever it is.)"""
    if item.get_closest_marker("stack"):
        yield
        return
    execute_child = subprocess.Popen._execute_child

    def refuse(self, args, executable, *rest, **kwargs):
        if _starts_a_service(args) or (executable and _starts_a_service([executable])):
            raise AssertionError(
                f"a test not marked `stack` starts a service: {args!r}; use a service "
                "fixture (tests/conftest.py SERVICE_FIXTURES) or mark it `stack`")
        return execute_child(self, args, executable, *rest, **kwargs)

    subprocess.Popen._execute_child = refuse
    try:
        yield
    finally:
        subprocess.Popen._execute_child = execute_child


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with _services_refused(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with _services_refused(item):
        return (yield)


@pytest.fixture(autouse=True)
def cpu_hog() -> Iterator[None]:
    """``BOTTLER_CPU_HOG=1``: every core kept busy by a busy-loop process beside the test, for
    its duration (``BOTTLER_CPU_HOG=<n>``: n processes), to show the views keep up on a machine
    with no idle CPU, e.g.
    ``BOTTLER_CPU_HOG=1 pytest tests/test_appliance.py tests/faults``."""
    import os
    import subprocess
    import sys

    wanted = os.environ.get("BOTTLER_CPU_HOG", "")
    if wanted in ("", "0"):
        yield
        return
    count = (os.cpu_count() or 2) if wanted == "1" else int(wanted)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
