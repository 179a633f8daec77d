"""A primary and its physical standby (pg_basebackup from a physical slot), servers of a test's
own, for the capture from a standby (tests/test_capture_standby.py, tests/bench/standby_cpu.py)
and failover slots (tests/test_failover_slots.py)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from compose.postgres import PostgresCluster
from compose.procs import free_port
from compose.stack import new_stack_dir

DB = "shop"


@contextmanager
def primary_and_standby(password: str, version: str = "18", feedback: bool = True,
                        wal_level: str = "logical", standby_settings: str = ""
                        ) -> Iterator[tuple[PostgresCluster, PostgresCluster]]:
    """Both running (database ``DB``), stopped and removed at the end. ``wal_level``: both
    servers' (the standby's configuration is the primary's copy); ``feedback``: the standby's
    hot_standby_feedback; ``standby_settings``: more lines of its postgresql.conf."""
    root = new_stack_dir()
    primary = PostgresCluster(root / "primary", free_port(), password, version)
    standby = PostgresCluster(root / "standby", free_port(), password, version)
    try:
        primary.init()
        with open(primary.data / "postgresql.conf", "a") as conf:
            conf.write(f"wal_level = {wal_level}\n")
        primary.start(databases=(DB,))
        standby.init_standby(primary, "standby1", DB)
        with open(standby.data / "postgresql.conf", "a") as conf:
            conf.write(f"hot_standby_feedback = {'on' if feedback else 'off'}\n"
                       + standby_settings)
        standby.start()
        yield primary, standby
    finally:
        for cluster in (standby, primary):
            if cluster.running_pid():
                cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def replayed(primary: PostgresCluster, standby: PostgresCluster) -> bool:
    """Whether the standby has replayed everything the primary wrote so far."""
    with psycopg.connect(primary.dsn(DB)) as p, psycopg.connect(standby.dsn(DB)) as s:
        lsn = p.execute("select pg_current_wal_lsn()::text").fetchone()[0]
        return s.execute("select pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]
