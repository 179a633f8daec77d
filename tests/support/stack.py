"""The session's stack of real services as tests see it (the `stack` fixture), and the servers of
the PostgreSQL matrix's other majors (tests/support/matrix.py PG_MATRIX)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from compose.postgres import PostgresCluster
from compose.procs import free_port
from compose.stack import SOURCE_DB, Stack, isolated_stack, new_stack_dir


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


# What tests wait for, checked every second, not at Kafka's defaults: the log cleaner's look
# for dirty logs (15 s; the compaction test waits for a few of its passes), and the abort of a
# timed-out transaction (10 s; a killed translator's open one holds read_committed readers back
# until then: tests/test_scale_out.py).
TEST_BROKER = {"log.cleaner.backoff.ms": "1000",
               "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000"}


@pytest.fixture(scope="session")
def stack() -> Iterator[RunningStack]:
    with isolated_stack(os.environ.get("BOTTLER_TEST_PG_VERSION"), TEST_BROKER) as running:
        yield RunningStack(running)


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
