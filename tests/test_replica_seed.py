"""The replica's initial copy from a snapshot of the source (`--seed-from`): under a write load,
killed mid-copy and restarted, the target ends equal to the source; truncates and schema changes
on either side of the seed, and tables that join later, end equal too."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from bottler.migrate.verify import verify
from tests.support.databases import execute, fresh_database, rows
from tests.support.waiting import wait_for

pytestmark = pytest.mark.stack

ROWS = 600_000  # items: ~5 ranges of 2,048 pages (--seed-chunk-pages), so a kill lands between two


def replica(stack, source: str, target: str, prefix: str, log: Path, *extra: str):
    """`bottler materialize postgres --seed-from SOURCE` as a child process, output to log."""
    out = open(log, "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "materialize", "postgres", "--target", target,
         "--seed-from", source, "--topic-prefix", prefix, "--broker", stack.kafka,
         "--schema-registry", stack.registry_url, "--on-poison", "stop", *extra],
        stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ),
    )


def seeds(target: str) -> dict[str, str]:
    try:
        return dict(rows(target, "select table_name, state from bottler.seeds"))
    except psycopg.errors.UndefinedTable:
        return {}


def count(dsn: str, table: str) -> int:
    try:
        return rows(dsn, f"select count(*) from {table}")[0][0]
    except psycopg.errors.UndefinedTable:
        return 0


@contextmanager
def write_load(dsn: str):
    """A writer thread: inserts, updates and deletes on items and notes, some transactions of
    several statements that stay open a few milliseconds (so some span the seed's snapshot)."""
    stop = threading.Event()
    done = [0]
    errors: list[BaseException] = []

    def run() -> None:
        rng = random.Random(18)
        next_id = ROWS + 1
        try:
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not stop.is_set():
                    with conn.transaction():
                        for _ in range(rng.randint(1, 4)):
                            op = rng.random()
                            if op < 0.4:
                                conn.execute("insert into items values (%s, 'new', 0, now())",
                                             (next_id,))
                                next_id += 1
                            elif op < 0.7:
                                conn.execute("update items set n = n + 1, a = 'upd' where id = %s",
                                             (rng.randint(1, next_id - 1),))
                            elif op < 0.85:
                                conn.execute("delete from items where id = %s",
                                             (rng.randint(1, next_id - 1),))
                            else:
                                conn.execute("insert into notes (body) values ('load')")
                                conn.execute("delete from notes where id = %s",
                                             (rng.randint(1, 1000),))
                        time.sleep(rng.random() * 0.005)
                    done[0] += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, name="write-load", daemon=True)
    thread.start()
    try:
        yield done
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors


def wait_equal(source: str, target: str, timeout: float = 120):
    last = None

    def equal():
        nonlocal last
        last = verify(source, target)
        return last.identical

    try:
        wait_for(equal, timeout, "the target to equal the source")
    except AssertionError:
        raise AssertionError([t for t in last.tables if not t.identical]) from None


def test_seed_killed_mid_copy_under_load_ends_equal(stack, source, prefix, start, tmp_path):
    execute(source,
            "create table items (id int primary key, a text not null, n int, t timestamptz)",
            f"insert into items select g, md5(g::text), g, now()"
            f" from generate_series(1, {ROWS}) g",
            "create table notes (id serial primary key, body text)",
            "insert into notes (body) select 'note ' || g from generate_series(1, 1000) g")
    start()
    log = tmp_path / "replica.log"
    with fresh_database(stack.pg_dsn) as target:
        again = None
        try:
            with write_load(source) as committed:
                wait_for(lambda: committed[0] > 20, 30, "the write load")
                first = replica(stack, source, target, prefix, log, "--seed-workers", "1",
                                 "--seed-chunk-pages", "2048")
                try:
                    wait_for(lambda: count(target, "items") > 0 or first.poll() is not None,
                             120, "the first copied range of items")
                finally:
                    first.kill()  # kill -9, mid-copy
                    first.wait(10)
                assert first.returncode == -9, log.read_text()
                states = seeds(target)
                assert states.get("items") == "copying", (states, log.read_text())
                assert 0 < count(target, "items") < ROWS
                assert not has_key(target, "items")  # built after the copy: not yet

                again = replica(stack, source, target, prefix, log)
                wait_for(lambda: set(seeds(target).values()) == {"done"}
                         or again.poll() is not None, 180, "the seed to finish")
                assert again.poll() is None, log.read_text()
                at_seed = committed[0]
                wait_for(lambda: committed[0] > at_seed + 50, 60, "writes after the seed")
            # the load has stopped: the replica catches up to exactly the source
            wait_equal(source, target)
            assert again.poll() is None, log.read_text()
        finally:
            if again is not None:
                again.terminate()
                again.wait(30)
        text = log.read_text()
        assert len(re.findall(r"seed: snapshot at", text)) == 2, text  # the restart: a new one
        assert rows(target, "select count(*) from bottler.seeds where state = 'done'") == [(2,)]
        assert rows(target, "select rows > 0 from bottler.seeds where table_name = 'items'") \
            == [(True,)]
        assert has_key(target, "items")  # given back to the emptied table, then built again


def has_key(dsn: str, table: str) -> bool:
    return rows(dsn, "select count(*) from pg_constraint where contype = 'p'"
                     f" and conrelid = '{table}'::regclass") == [(1,)]


def test_truncates_schema_changes_and_later_tables_around_the_seed(stack, source, prefix,
                                                                    start, tmp_path):
    execute(source,
            "create table a (id int primary key, v text)",
            "insert into a select g, 'a' || g from generate_series(1, 3000) g",
            "create table b (id int primary key, v text)",
            "insert into b select g, 'b' || g from generate_series(1, 3000) g")
    start()
    wait_for(lambda: count(source, "a") and _topic_ready(stack, prefix), 60, "the capture")
    # before the seed: a truncate and changes, all in the topics
    execute(source, "truncate b", "insert into b select g, 'b2' || g from generate_series(1, 50) g",
            "update a set v = 'changed' where id <= 10", "delete from a where id > 2900")
    log = tmp_path / "replica.log"
    with fresh_database(stack.pg_dsn) as target:
        execute(target, "create table b (id int primary key, v text)")  # empty: adopted
        done = replica(stack, source, target, prefix, log, "--once")
        assert done.wait(120) == 0, log.read_text()
        assert seeds(target) == {"a": "done", "b": "done"}
        wait_equal(source, target, 30)
        # after the seed: a truncate, a new column, a new table, more changes
        execute(source, "truncate a", "insert into a values (1, 'after')",
                "alter table b add column w int default 7", "update b set v = 'x' where id = 1",
                "create table c (id int primary key, v text)", "insert into c values (1, 'c')")
        wait_for(lambda: _topic_ready(stack, prefix, "c"), 60, "table c to join the capture")
        again = replica(stack, source, target, prefix, log)
        try:
            wait_equal(source, target, 60)
            assert rows(target, "select w from b where id = 1") == [(7,)]
        finally:
            again.terminate()
            again.wait(30)
        assert "c" not in seeds(target)  # joined later: read from its topic
        assert rows(target, "select adopted from bottler.replica_tables where table_name = 'b'"
                    ) == [(True,)]


def _topic_ready(stack, prefix: str, table: str = "a") -> bool:
    from confluent_kafka.admin import AdminClient

    topics = AdminClient({"bootstrap.servers": stack.kafka}).list_topics(timeout=10).topics
    return f"{prefix}.{table}" in topics
