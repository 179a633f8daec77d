"""Issue 4's proof: a database migration under load. A sustained mixed write load runs on the
source (inserts, updates of large and small columns, deletes, a truncate, an added column) while
capture and the replica run; the replica is killed with `kill -9` midway and restarted; once the
load stops, `bottler migrate verify` finds source and target identical."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.support.databases import WriteLoad, execute, fresh_database
from tests.support.waiting import wait_for, wait_streaming

pytestmark = pytest.mark.pg_matrix  # on PostgreSQL 15 and 18 (tests/conftest.py)

SCHEMA = [
    "create table accounts (id int primary key, balance numeric(12,2) not null, "
    " note text, doc text)",
    "alter table accounts alter column doc set storage external",
    "alter table accounts replica identity full",  # updates that leave doc alone stay complete
    "create table events (id bigserial primary key, account int, kind text, at timestamptz)",
    "insert into accounts select g, g, 'n' || g, repeat('d', 3000) from generate_series(1, 500) g",
]


class Load(WriteLoad):
    """Mixed writes until stopped; one truncate and one added column along the way."""

    seed = 3

    def transaction(self, conn, rnd) -> None:
        account = rnd.randint(1, 600)
        conn.execute("insert into events (account, kind, at) values (%s, 'tick', now())",
                     (account,))
        match rnd.randint(0, 9):
            case 0 | 1 | 2:
                conn.execute("update accounts set balance = balance + 1 where id = %s",
                             (account,))
            case 3:
                conn.execute("update accounts set doc = repeat(%s, 4000) where id = %s",
                             (chr(97 + account % 26), account))
            case 4:
                conn.execute("delete from accounts where id = %s", (account,))
            case 5 | 6:
                conn.execute("insert into accounts values (%s, 0, 'new', 'x') "
                             "on conflict (id) do nothing", (account,))
            case _:
                conn.execute("delete from events where id = (select min(id) from events)")

    def after_commit(self, conn) -> None:
        if self.commits == 300:
            conn.execute("truncate events")
        if self.commits == 600:
            conn.execute("alter table accounts add column tier int default 1")


def replica(stack, target: str, prefix: str, log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "materialize", "postgres",
         "-b", stack.kafka, "-r", stack.registry_url, "-p", prefix, "--batch-size", "500"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "BOTTLER_TARGET_DSN": target},  # argv is visible in ps
    )


def verify(source: str, target: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bottler", "migrate", "verify", "--source", source,
         "--target", target],
        capture_output=True, text=True, timeout=120,
    )


def test_migration_under_load_with_a_killed_replica_verifies_identical(
    stack, source, prefix, start, tmp_path
):
    execute(source, *SCHEMA)
    start(heartbeat_interval=1.0)
    wait_streaming(source, prefix)
    log = open(tmp_path / "replica.log", "ab")  # noqa: SIM115
    with fresh_database(stack.pg_dsn) as target:
        load = Load(source)
        load.start()
        proc = replica(stack, target, prefix, log)
        try:
            wait_for(lambda: load.commits > 400, 60, "the load to pass its truncate")
            time.sleep(random.uniform(0.5, 2.0))
            os.killpg(proc.pid, signal.SIGKILL)  # the replica dies mid-batch
            proc.wait(30)
            proc = replica(stack, target, prefix, log)
            wait_for(lambda: load.commits > 900, 90, "the load to pass its added column")
        finally:
            load.stopped.set()
            load.join(30)
        assert load.error is None, load.error

        def identical():
            assert proc.poll() is None, (tmp_path / "replica.log").read_text()[-3000:]
            result = verify(source, target)
            assert result.returncode in (0, 1), result.stderr
            return result if result.returncode == 0 else None

        try:
            result = wait_for(identical, 120, "the replica to equal the source")
        except AssertionError:
            raise AssertionError(verify(source, target).stdout) from None
        finally:
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(30)
            log.close()
    assert status == 0, (tmp_path / "replica.log").read_text()[-3000:]  # a graceful stop
    assert "accounts" in result.stdout and "events" in result.stdout
    assert load.commits > 900
