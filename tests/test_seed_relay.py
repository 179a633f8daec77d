"""The seed's COPY relay (materializers/postgres/relay.py): two psql processes piping one range
from a source into a target, against the real server; what each failure leaves behind."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from common.errors import BottlerError
from common.pg import client_args
from materializers.postgres import relay
from tests.support.databases import execute, fresh_database, rows

pytestmark = pytest.mark.stack


@pytest.fixture
def sides(stack, source):
    with fresh_database(stack.pg_dsn) as target:
        execute(source, "create table t (id int primary key, v text)",
                "insert into t select i, 'v' || i from generate_series(1, 5000) i")
        execute(target, "create table t (id int primary key, v text check (v <> 'v77'))")
        yield relay.Side(source), relay.Side(target)


def test_a_range_is_copied_and_counted(sides):
    source, target = sides
    execute(target.dsn, "alter table t drop constraint t_v_check")
    # statements before the COPY (the seed's: its snapshot) put nothing into the rows
    source = relay.Side(source.dsn, ("begin isolation level repeatable read read only",
                                     "set search_path = public"))
    copied = relay.copy(source, "copy (select * from t where id <= 3000) to stdout (format binary)",
                        target, "copy t from stdin (format binary)", threading.Event())
    assert copied == 3000
    assert rows(target.dsn, "select count(*), max(id) from t") == [(3000, 3000)]


def test_rows_the_target_refuses_leave_nothing(sides):
    source, target = sides
    with pytest.raises(relay.Refused, match="t_v_check"):
        relay.copy(source, "copy t to stdout", target, "copy t from stdin", threading.Event())
    assert rows(target.dsn, "select count(*) from t") == [(0,)]


def test_a_failing_source_is_named(sides):
    source, target = sides
    with pytest.raises(BottlerError, match="the source's COPY failed.*no_such_table"):
        relay.copy(source, "copy no_such_table to stdout", target, "copy t from stdin",
                   threading.Event())
    assert rows(target.dsn, "select count(*) from t") == [(0,)]


def test_a_stop_ends_both_processes_and_keeps_nothing(sides):
    source, target = sides
    execute(target.dsn, "alter table t drop constraint t_v_check")
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    with pytest.raises(relay.Stopped):  # a COPY that would run for ever
        relay.copy(source, "copy (select i, 'x' from generate_series(1, 1000000000) i)"
                   " to stdout", target, "copy t from stdin", stop)
    assert not psql_children()
    assert rows(target.dsn, "select count(*) from t") == [(0,)]


def psql_children() -> list[int]:
    """The pids of psql processes whose parent is this process."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()  # pid (name) state ppid ...
        except OSError:
            continue  # ended meanwhile
        name, after = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:]
        if name == "psql" and int(after.split()[1]) == os.getpid():
            found.append(int(stat.parent.name))
    return found


def test_a_client_program_gets_the_password_in_its_environment_not_its_arguments():
    dsn, env = client_args("host=db port=5433 dbname=shop user=app password=s3cret")
    assert "s3cret" not in dsn and "host=db" in dsn and "port=5433" in dsn
    assert env["PGPASSWORD"] == "s3cret"
