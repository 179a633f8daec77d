"""`bottler migrate cutover` against a real capture, replica, broker and databases (issue 18).

The demo shop migrates under the demo load: the load pauses, the cutover says go, the load
resumes against the target without a duplicate key, the foreign keys are there and validated,
and `migrate verify` finds the two equal. A target row corrupted before the fence makes it a
no-go naming the key, and the fenced role gets its access back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from bottler.migrate.status import status
from compose.demo import seed
from compose.load import ERRORS, run_load
from tests.support.databases import execute, fresh_database, rows
from tests.support.waiting import wait_for, wait_streaming

pytestmark = [pytest.mark.stack, pytest.mark.pg_matrix]  # 15 and 18

ROOT = Path(__file__).resolve().parent.parent


def replica(stack, target: str, prefix: str, log, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "materialize", "postgres",
         "-b", stack.kafka, "-r", stack.registry_url, "-p", prefix, *args],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=ROOT,
        env={**os.environ, "BOTTLER_TARGET_DSN": target},
    )


def cutover(stack, source: str, target: str, prefix: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "migrate", "cutover", "-b", stack.kafka,
         "-p", prefix, "--slot", prefix, "--fence-timeout", "120", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        env={**os.environ, "BOTTLER_PG_DSN": source, "BOTTLER_TARGET_DSN": target,
             "COLUMNS": "200"},
    )


def adoption_recorded(target: str, group: str, proc: subprocess.Popen):
    """Whether the replica of consumer group ``group`` has recorded its adoption point."""
    def recorded() -> bool:
        assert proc.poll() is None, "the replica ended"
        return rows(target, "select to_regclass('bottler.adoption_starts') is not null") == [
            (True,)] and rows(target, "select count(*) from bottler.adoption_starts"
                                      f" where group_id = '{group}'") == [(1,)]
    return recorded


def caught_up(stack, source, target, prefix, group="bottler-postgres", proc=None):
    def check():
        assert proc is None or proc.poll() is None, "the replica exited"
        try:
            return status(source, target, stack.kafka, prefix, group).caught_up
        except Exception:  # noqa: BLE001 - the replica has not created everything yet
            return False
    return check


@pytest.mark.pg_single  # on 18 the cutover runs in test_going_back_is_a_cutover_the_other_way
def test_demo_shop_cutover_under_load_says_go(stack, source, prefix, start, tmp_path):
    seed(source)
    start(heartbeat_interval=1.0)
    wait_streaming(source, prefix)
    log = open(tmp_path / "replica.log", "ab")  # noqa: SIM115
    stop_load = threading.Event()
    with fresh_database(stack.pg_dsn) as target:
        proc = replica(stack, target, prefix, log)
        load = threading.Thread(target=run_load, args=(source, 20.0, stop_load), daemon=True)
        try:
            load.start()
            wait_for(caught_up(stack, source, target, prefix), 180, "the replica to catch up")
            wait_for(lambda: rows(source, "select count(*) from orders")[0][0] > 5010, 60,
                     "the load to place orders")
            stop_load.set()  # the application's writes stop here
            load.join(30)
            run = cutover(stack, source, target, prefix, "--sequence-margin", "10",
                          "--report", str(tmp_path / "cutover.md"))
            output = []
            for line in run.stdout:
                output.append(line)
                if "stop `bottler materialize postgres`" in line:
                    proc.send_signal(signal.SIGTERM)  # the operator stops the replica
            assert run.wait(60) == 0, "".join(output)
        finally:
            stop_load.set()
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            log.close()
        text = "".join(output)
        assert "verdict: go" in text, text
        report = json.loads((tmp_path / "cutover.json").read_text())
        assert report["verdict"] == "go" and report["downtime_seconds"] > 0
        assert {t["table"] for t in report["tables"] if t["identical"]} == {
            "public.customers", "public.products", "public.orders", "public.order_items"}
        assert "# Cutover: go" in (tmp_path / "cutover.md").read_text()

        # The two are equal at the fence.
        verified = subprocess.run(
            [sys.executable, "-m", "bottler", "migrate", "verify", "--source", source,
             "--target", target], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert verified.returncode == 0, verified.stdout + verified.stderr

        # Sequences: set past the source's values, identity columns created.
        sequences = {s["sequence"]: s for s in report["sequences"]}
        max_order = rows(source, "select max(id) from orders")[0][0]
        assert sequences["public.orders_id_seq"]["value"] == \
            sequences["public.orders_id_seq"]["source_value"] + 10 >= max_order + 10
        assert rows(target, "select attidentity from pg_attribute where attrelid ="
                    " 'orders'::regclass and attname = 'id'") == [("d",)]

        # Foreign keys exist and are validated.
        fks = rows(target, "select conname, convalidated from pg_constraint where contype = 'f'"
                   " order by 1")
        assert fks == [("order_items_order_id_fkey", True), ("order_items_product_id_fkey", True),
                       ("orders_customer_id_fkey", True)]
        assert rows(target, "select count(*) from pg_constraint where contype = 'u'"
                    " and connamespace = 'public'::regnamespace") == [(2,)]

        # The load resumes against the target: its inserts succeed.
        errors = ERRORS._value.get()
        done = run_load(target, 50.0, threading.Event(), duration=3.0, seed=7)
        assert ERRORS._value.get() == errors
        assert done.get("place_order", 0) > 0 and done.get("sign_up", 0) > 0
        assert rows(target, f"select min(id) from orders where id > {max_order}")[0][0] \
            > max_order + 10


@pytest.fixture
def role(stack, source):
    """A login role of the application, with a password, dropped at the end."""
    name = f"app_{uuid.uuid4().hex[:8]}"
    execute(stack.pg_dsn, f"create role {name} login password 'secret'")
    yield name
    execute(source, f"drop owned by {name}")
    execute(stack.pg_dsn, f"drop role {name}")


def as_role(dsn: str, role: str) -> str:
    params = conninfo_to_dict(dsn) | {"user": role, "password": "secret"}
    return make_conninfo(**params)


@pytest.mark.pg_single  # its kind is checked on both majors by the others: the suite's time
def test_corrupt_target_row_is_a_no_go_naming_the_key_and_roles_get_access_back(
        stack, source, prefix, start, role, tmp_path):
    execute(source,
            "create table items (id int primary key, name text not null)",
            "insert into items select g, 'item ' || g from generate_series(1, 300) g",
            f"grant select, insert, update, delete on items to {role}")
    start(heartbeat_interval=1.0)
    wait_streaming(source, prefix)
    log = open(tmp_path / "replica.log", "ab")  # noqa: SIM115
    with fresh_database(stack.pg_dsn) as target:
        proc = replica(stack, target, prefix, log)
        try:
            wait_for(caught_up(stack, source, target, prefix), 120, "the replica to catch up")
            dry = cutover(stack, source, target, prefix, "--dry-run", "--fence-roles", role)
            out = dry.communicate(timeout=120)[0]
            assert dry.returncode == 0, out
            assert "verdict: ready (dry run)" in out and f"{role} will be fenced out" in out

            execute(target, "update items set name = 'corrupt' where id = 42")
            app = psycopg.connect(as_role(source, role), autocommit=True)
            app.execute("select 1")
            run = cutover(stack, source, target, prefix, "--fence-roles", role,
                          "--report", str(tmp_path / "cutover.md"))
            out = run.communicate(timeout=180)[0]
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
            log.close()
        assert run.returncode == 1, out
        assert "verdict: no-go" in out and "different: id=42" in out, out
        report = json.loads((tmp_path / "cutover.json").read_text())
        items = next(t for t in report["tables"] if t["table"] == "public.items")
        assert items["differences"] == [{"kind": "different", "key": "id=42"}]
        assert report["fence"]["roles_fenced"] == [role]
        assert report["fence"]["sessions_ended"] == 1 and report["fence"]["roles_restored"]
        # The role's session was ended by the fence; it may connect again after the no-go.
        with pytest.raises(psycopg.OperationalError):
            app.execute("select 1")
        app.close()
        assert rows(source, f"select rolconnlimit from pg_roles where rolname = '{role}'") \
            == [(-1,)]
        with psycopg.connect(as_role(source, role)) as again:
            assert again.execute("select count(*) from items").fetchone() == (300,)


def run_cutover(stack, source, target, prefix, replica_proc, *args: str) -> str:
    """The cutover's output; the replica is stopped when the cutover asks for it."""
    run = cutover(stack, source, target, prefix, *args)
    output = []
    for line in run.stdout:
        output.append(line)
        if "stop `bottler materialize postgres`" in line:
            replica_proc.send_signal(signal.SIGTERM)
    run.wait(60)
    return "".join(output)


def test_going_back_is_a_cutover_the_other_way(stack, source, prefix, start, tmp_path):
    execute(source,
            "create table parents (id int generated by default as identity primary key,"
            " name text not null)",
            "create table children (id bigint generated always as identity primary key,"
            " parent int not null references parents (id), note text)",
            "insert into parents (name) select 'p' || g from generate_series(1, 50) g",
            "insert into children (parent, note) select 1 + g % 50, 'c' || g"
            " from generate_series(1, 200) g")
    start(heartbeat_interval=1.0)
    wait_streaming(source, prefix)
    log = open(tmp_path / "replica.log", "ab")  # noqa: SIM115
    back = f"{prefix}_back"
    with fresh_database(stack.pg_dsn) as target:
        forward = replica(stack, target, prefix, log)
        try:
            wait_for(caught_up(stack, source, target, prefix), 120, "the replica to catch up")
            out = run_cutover(stack, source, target, prefix, forward)
            assert "verdict: go" in out, out
        finally:
            if forward.poll() is None:
                forward.send_signal(signal.SIGTERM)
            forward.wait(30)

        # Going back: a capture of the new database, without a snapshot, and a replica into
        # the old one, whose foreign keys go and whose ALWAYS identity becomes BY DEFAULT.
        # Stopped before the new database is dropped, which would end its session.
        back_capture = start(postgres=target, slot=back, topic_prefix=back, skip_snapshot=True)
        wait_streaming(target, back)
        execute(source, "alter table children drop constraint children_parent_fkey",
                "alter table children alter column id set generated by default")
        backward = replica(stack, source, back, log, "--group-id", "bottler-back",
                           "--adopt-existing")
        try:
            # The application starts once the replica has recorded where its adoption starts:
            # events before that point never remove the old database's rows (docs/migration.md)
            wait_for(adoption_recorded(source, "bottler-back", backward), 60,
                     "the replica to record its adoption point")
            # The application writes to the new database, ids from its sequences.
            execute(target,
                    "insert into parents (name) select 'new' || g from generate_series(1, 5) g",
                    "insert into children (parent, note) select id, 'new' from parents"
                    " where name like 'new%'",
                    "update parents set name = 'renamed' where id = 3",
                    "delete from children where id = 7")
            wait_for(caught_up(stack, target, source, back, "bottler-back", backward), 120,
                     "the old database to follow the new one")
            out = run_cutover(stack, target, source, back, backward, "--group", "bottler-back")
        finally:
            if backward.poll() is None:
                backward.send_signal(signal.SIGTERM)
            backward.wait(30)
            back_capture.stop()
            log.close()
        assert "verdict: go" in out, out
        assert rows(source, "select count(*), max(id) from parents") == [(55, 55)]
        assert rows(source, "select name from parents where id = 3") == [("renamed",)]
        assert rows(source, "select conname, convalidated from pg_constraint"
                    " where contype = 'f'") == [("children_parent_fkey", True)]
        # The old database hands out ids past the new one's.
        execute(source, "insert into children (parent, note) values (1, 'back')")
        assert rows(source, "select max(id) from children") == [(206,)]
