"""Databases for tests: a fresh one per test (the `source` and `target` fixtures), SQL in one
line, and a load of small transactions."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest


class WriteLoad(threading.Thread):
    """Commits small transactions against ``dsn`` until stopped: each a ``transaction(conn,
    rnd)`` of the subclass, then its ``after_commit(conn)``; ``commits`` counts them and an
    exception ends the load and waits in ``error`` for the test to report it."""

    seed = 0
    pause = 0.003  # seconds between transactions

    def __init__(self, dsn: str):
        super().__init__(daemon=True)
        self.dsn = dsn
        self.stopped = threading.Event()
        self.commits = 0
        self.error: BaseException | None = None

    def transaction(self, conn: psycopg.Connection, rnd) -> None:
        raise NotImplementedError

    def after_commit(self, conn: psycopg.Connection) -> None:
        pass

    def run(self) -> None:
        import random

        rnd = random.Random(self.seed)
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stopped.is_set():
                    with conn.transaction():
                        self.transaction(conn, rnd)
                    self.commits += 1
                    self.after_commit(conn)
                    time.sleep(self.pause)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def with_database(dsn: str, name: str) -> str:
    return dsn.rsplit("/", 1)[0] + "/" + name


@contextmanager
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """A new empty database; on exit its slots are dropped and it is removed."""
    name = f"src_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"create database {name}")
    try:
        yield with_database(admin_dsn, name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            for (slot, pid) in conn.execute(
                "select slot_name, active_pid from pg_replication_slots where database = %s",
                (name,),
            ).fetchall():
                if pid:
                    conn.execute("select pg_terminate_backend(%s)", (pid,))
                    time.sleep(0.5)
                conn.execute("select pg_drop_replication_slot(%s)", (slot,))
            conn.execute(f"drop database {name} with (force)")


def execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def rows(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


@pytest.fixture
def source(stack, pg_major):
    with fresh_database(stack.pg_dsn) as dsn:
        yield dsn


@pytest.fixture
def target(stack, pg_major):
    """A second fresh database, where a view writes."""
    with fresh_database(stack.pg_dsn) as dsn:
        yield dsn
