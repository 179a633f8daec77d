"""Stored generated columns (issue 29, item 5): PostgreSQL 18 publishes them as values when the
publication asks (publish_generated_columns = stored), which --generated-columns auto does where
the server can; on 15 to 17 they are left out, and asking for them is refused in one line."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from common.errors import BottlerError
from tests.support.databases import execute, fresh_database, rows
from tests.support.replica import converge, replica
from tests.support.topics import Decoder, read_topic
from tests.support.waiting import wait_for, wait_streaming

pytestmark = pytest.mark.pg_matrix  # on PostgreSQL 15 and 18 (tests/conftest.py)

TABLE = "create table g (id int primary key, a int, b int generated always as (a * 2) stored)"


def publishes_generated(dsn: str) -> bool:
    """Whether the server can publish stored generated columns (18 on), asked of it: the
    matrix may run 16 and 17 too (make test-pg-matrix)."""
    return int(rows(dsn, "show server_version_num")[0][0]) >= 180000


def test_stored_generated_columns_are_values_on_18_and_left_out_on_15(
        stack, source, prefix, start):
    execute(source, TABLE, "insert into g (id, a) values (1, 1)")
    start()
    topic = f"{prefix}.g"
    decoder = Decoder(stack.registry_url)

    def state():
        try:
            current = decoder.table_state(read_topic(stack.kafka, topic))
        except KeyError:
            return None
        return {k[0][1]: v for k, v in current.items()}

    with_b = publishes_generated(source)
    expected = {1: {"id": 1, "a": 1} | ({"b": 2} if with_b else {})}
    wait_for(lambda: state() == expected, 60, "the snapshot's row")  # the snapshot's COPY
    # the stream: an insert, and an update of the column b is computed from
    execute(source, "insert into g (id, a) values (2, 2)", "update g set a = 10 where id = 1")
    expected = {1: {"id": 1, "a": 10}, 2: {"id": 2, "a": 2}}
    if with_b:
        expected = {1: expected[1] | {"b": 20}, 2: expected[2] | {"b": 4}}
    wait_for(lambda: state() == expected, 60, "the streamed insert and update")
    if with_b:  # the capture's publication asks for them
        assert rows(source, f"select pubgencols from pg_publication where pubname = '{prefix}'"
                    ) == [("s",)]


def test_asking_for_generated_columns_before_18_fails_in_one_line_and_creates_nothing(
        source, prefix, start):
    if publishes_generated(source):
        pytest.skip("PostgreSQL 18 publishes generated columns")
    execute(source, TABLE)
    error = start(generated_columns="on").wait_failed()
    assert isinstance(error, BottlerError), error
    assert "--generated-columns on needs PostgreSQL 18" in str(error).splitlines()[0]
    assert rows(source, "select slot_name from pg_replication_slots"
                f" where slot_name = '{prefix}'") == []
    assert rows(source, f"select pubname from pg_publication where pubname = '{prefix}'") == []


def test_the_replica_writes_the_values_but_never_into_a_column_the_target_generates(
        stack, source, target, prefix, start):
    execute(source, TABLE, "insert into g (id, a) select i, i from generate_series(1, 5) i",
            "create table k (like g including all)", "insert into k (id, a) values (1, 1)")
    execute(target, TABLE)  # the user's own table, which generates b as the source does
    start()
    wait_streaming(source, prefix)
    # k is the replica's: b a plain column holding the published values (none before 18)
    k = "select id, a, b from k order by id" if publishes_generated(source) else (
        "select id, a from k")
    with replica(stack, target, prefix) as (_, _, failure):
        converge(source, target, ["select id, a, b from g order by id", k], failure)
        execute(source, "update g set a = 100 where id <= 2", "insert into g (id, a) values (9, 9)",
                "update k set a = 7")
        converge(source, target, ["select id, a, b from g order by id", k], failure)
    assert rows(target, "select attgenerated from pg_attribute"
                " where attrelid = 'g'::regclass and attname = 'b'") == [("s",)]


def test_generated_columns_turned_on_at_a_restart_publish_the_table_again(
        stack, source, prefix, start):
    if not publishes_generated(source):
        pytest.skip("PostgreSQL before 18 does not publish generated columns")
    execute(source, TABLE, "insert into g (id, a) values (1, 1), (2, 2)")
    first = start(generated_columns="off")
    wait_streaming(source, prefix)
    first.stop()
    start()  # auto: on, on 18
    decoder = Decoder(stack.registry_url)

    def values():
        state = decoder.table_state(read_topic(stack.kafka, f"{prefix}.g"))
        return sorted(map(tuple, (v.values() for v in state.values())))

    wait_for(lambda: values() == [(1, 1, 2), (2, 2, 4)], 60, "the rows again, with b")
    assert rows(source, f"select pubgencols from pg_publication where pubname = '{prefix}'"
                ) == [("s",)]


def test_the_seed_copies_the_generated_values_the_topic_carries(
        stack, source, prefix, start, tmp_path):
    """The replica's seed (--seed-from) copies from the source the columns of the topic's
    schema: with the generated ones on 18, into a plain column of its own table and never into
    one the target generates."""
    execute(source, TABLE, "insert into g (id, a) select i, i from generate_series(1, 50) i",
            "create table h (like g including all)", "insert into h (id, a) values (1, 1)")
    start()
    wait_streaming(source, prefix)
    with fresh_database(stack.pg_dsn) as target, open(tmp_path / "seed.log", "ab") as log:
        execute(target, TABLE.replace(" g ", " h "))  # empty, and generates b itself
        seed = subprocess.run(
            [sys.executable, "-m", "bottler", "materialize", "postgres", "--target", target,
             "--seed-from", source, "--topic-prefix", prefix, "--broker", stack.kafka,
             "--schema-registry", stack.registry_url, "--on-poison", "stop", "--once"],
            stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ), timeout=300)
        assert seed.returncode == 0, (tmp_path / "seed.log").read_text()
        assert dict(rows(target, "select table_name, state from bottler.seeds")) == {
            "g": "done", "h": "done"}
        g = "select id, a, b from g order by id" if publishes_generated(source) else (
            "select id, a from g")
        assert rows(target, g) == rows(source, g)
        assert rows(target, "select id, a, b from h") == [(1, 1, 2)]
