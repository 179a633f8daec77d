"""Test session harness: an isolated embedded stack of real services on free ports, started
once per session and torn down at its end (every process stopped, every file removed)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from compose.stack import Stack, isolated_stack


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
