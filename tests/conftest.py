"""Test session harness: an isolated embedded stack of real services on free ports, started
once per session and torn down at its end (every process stopped, every file removed)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from compose.postgres import PostgresCluster
from compose.procs import free_port
from compose.stack import SOURCE_DB, Stack, isolated_stack, new_stack_dir
from tests.capture_support import CaptureThread
from tests.support import fresh_database

# The PostgreSQL majors the version matrix runs (docs/capture.md): a test module marked
# `pg_matrix` runs each of its tests once per major, on the session's stack (PostgreSQL of
# $BOTTLER_TEST_PG_VERSION, default the first found) and on a second server for the other.
PG_MATRIX = ("15", "18")


@dataclass
class RunningStack:
    """What tests need of the stack: its endpoints and a way to restart one service. A matrix
    test's PostgreSQL (``postgres``) may be another server than the stack's own."""

    stack: Stack
    postgres: PostgresCluster | None = None

    @property
    def pg(self) -> PostgresCluster:
        return self.postgres or self.stack.postgres

    @property
    def pg_dsn(self) -> str:
        return self.pg.dsn(SOURCE_DB)

    @property
    def kafka(self) -> str:
        return self.stack.endpoints.kafka

    @property
    def registry_url(self) -> str:
        return self.stack.endpoints.registry

    @property
    def search_url(self) -> str:
        return self.stack.endpoints.search

    def restart(self, service: str) -> None:
        if service == "postgres" and self.postgres is not None:
            self.postgres.stop()
            self.postgres.start()
            return
        self.stack.restart(service)


@pytest.fixture(scope="session")
def stack() -> Iterator[RunningStack]:
    with isolated_stack(os.environ.get("BOTTLER_TEST_PG_VERSION")) as running:
        yield RunningStack(running)


def pytest_generate_tests(metafunc):
    """A `pg_matrix` test runs once per major of PG_MATRIX (ids pg15, pg18; the second major's
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


@pytest.fixture(scope="session")
def other_postgres() -> Iterator[dict[str, PostgresCluster]]:
    """The matrix's other servers, each started when a test first asks for it (in their own
    temporary directory, on a free port), all stopped and removed at the session's end."""
    started: dict[str, PostgresCluster] = {}
    try:
        yield started
    finally:
        for cluster in started.values():
            try:
                cluster.stop()
            finally:
                shutil.rmtree(cluster.home.parent, ignore_errors=True)


@pytest.fixture(autouse=True)
def pg_major(request) -> Iterator[str | None]:
    """The PostgreSQL major of a matrix test (its parameter), which the `stack` fixture's pg_dsn
    then points at for the test's duration; None for any other test (which may need no stack
    at all)."""
    major = getattr(request, "param", None)
    if major is None:
        yield None
        return
    stack = request.getfixturevalue("stack")
    if major == stack.stack.postgres.data_version():
        yield major
        return
    others = request.getfixturevalue("other_postgres")
    if major not in others:
        root = new_stack_dir()
        cluster = PostgresCluster(root, free_port(), stack.stack.password, major)
        others[major] = cluster  # stopped and removed at the session's end, even half-started
        cluster.init()
        cluster.start(databases=(SOURCE_DB,))
    stack.postgres = others[major]
    try:
        yield major
    finally:
        stack.postgres = None


# -- capture tests: a fresh source database, a unique prefix, captures stopped at the end --

@pytest.fixture
def source(stack, pg_major):
    with fresh_database(stack.pg_dsn) as dsn:
        yield dsn


@pytest.fixture
def prefix():
    return f"t{uuid.uuid4().hex[:8]}"


@pytest.fixture
def start(stack, source, prefix):
    """Start a capture of ``source`` with the test's prefix; stopped at the end of the test."""
    running = []

    def start_capture(**overrides) -> CaptureThread:
        settings = dict(postgres=source, broker=stack.kafka, schema_registry=stack.registry_url,
                        slot=prefix, topic_prefix=prefix, heartbeat_interval=1.0,
                        snapshot_workers=1)
        capture = CaptureThread(**(settings | overrides)).start()
        running.append(capture)
        return capture

    yield start_capture
    for capture in running:
        if capture.thread.is_alive():
            capture.stop()


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
