"""Test session harness: an isolated embedded stack of real services on free ports, started
once per session and torn down at its end (every process stopped, every file removed)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from compose.stack import Stack, isolated_stack
from tests.capture_support import CaptureThread
from tests.support import fresh_database


@dataclass
class RunningStack:
    """What tests need of the stack: its endpoints and a way to restart one service."""

    stack: Stack

    @property
    def pg_dsn(self) -> str:
        return self.stack.endpoints.pg_dsn

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
        self.stack.restart(service)


@pytest.fixture(scope="session")
def stack() -> Iterator[RunningStack]:
    with isolated_stack() as running:
        yield RunningStack(running)


# -- capture tests: a fresh source database, a unique prefix, captures stopped at the end --

@pytest.fixture
def source(stack):
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
