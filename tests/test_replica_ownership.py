"""The replica never destroys what it did not create (issue 13, item 3), through the real command
line (`python -m bottler materialize postgres --once`): targets whose tables already exist with
an extra column, a missing column, an incompatible type, a NOT NULL column the source cannot
fill, and rows of their own. Each case ends as docs/migration.md says: written into with the
user's columns and rows kept, or refused with one clear line and the target untouched."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support.cli import assert_clear_error, bottler
from tests.support.databases import execute, rows
from tests.support.waiting import wait_for, wait_streaming

SOURCE = """
create table t1 (id int primary key, name text, qty int);
insert into t1 values (1, 'one', 10), (2, 'two', 20);
create table t2 (id int primary key, amount int);
insert into t2 values (1, 5);
"""
T1 = "select * from t1 order by id"


def replicate(stack, target: str, prefix: str, *flags: str):
    return bottler("materialize", "postgres", "--target", target, "--broker", stack.kafka,
                   "--schema-registry", stack.registry_url, "--topic-prefix", prefix,
                   "--group-id", "replica", "--once", *flags, timeout=120)


def columns(dsn: str, table: str) -> list[tuple[str, str]]:
    return rows(dsn, "select attname::text, format_type(atttypid, atttypmod) from pg_attribute"
                     f" where attrelid = '{table}'::regclass and attnum > 0"
                     " and not attisdropped order by attnum")


def wait_published(source: str, slot: str) -> None:
    """Until the capture has confirmed the source's current WAL position: every change made
    so far is in Kafka."""
    with psycopg.connect(source, autocommit=True) as conn:
        lsn = conn.execute("select pg_current_wal_lsn()").fetchone()[0]

        def confirmed():
            return conn.execute("select confirmed_flush_lsn >= %s from pg_replication_slots"
                                " where slot_name = %s", (lsn, slot)).fetchone() == (True,)

        wait_for(confirmed, 60, "the capture to publish the changes")


@pytest.fixture
def captured(stack, source, prefix, start):
    execute(source, SOURCE)
    start()
    wait_streaming(source, prefix)
    wait_published(source, prefix)
    return source


def test_a_table_with_rows_and_columns_of_its_own_is_adopted_only_when_asked(
        stack, captured, target, prefix):
    execute(target, "create table t1 (id int primary key, name text,"
                    " precious text not null default 'none')",
            "insert into t1 values (1, 'mine', 'gold'), (99, 'theirs', 'silver')")
    before = rows(target, T1)

    # rows the replica did not write: refused, nothing changed
    refused = replicate(stack, target, prefix)
    assert_clear_error(refused, "public.t1", "already holds rows", "--adopt-existing")
    assert rows(target, T1) == before
    assert [c for c, _ in columns(target, "t1")] == ["id", "name", "precious"]

    # adopted: the source's keys overwritten, the user's column and other rows kept, the
    # missing column added; never a DROP COLUMN
    adopted = replicate(stack, target, prefix, "--adopt-existing")
    assert adopted.returncode == 0, adopted.stderr
    assert "drop column" not in adopted.stderr
    assert rows(target, T1) == [(1, "one", "gold", 10), (2, "two", "none", 20),
                                (99, "theirs", "silver", None)]
    assert rows(target, "select * from t2") == [(1, 5)]
    assert rows(target, "select adopted, columns from bottler.replica_tables"
                        " where table_name = 't1'") == [(True, ["qty"])]

    # the source evolves: the column the replica added follows it (dropped), the user's stays
    execute(captured, "alter table t1 drop column qty", "alter table t1 add column note text",
            "update t1 set note = 'noted' where id = 1")
    wait_published(captured, prefix)
    evolved = replicate(stack, target, prefix)  # adopted once, recorded: no flag needed
    assert evolved.returncode == 0, evolved.stderr
    assert [c for c, _ in columns(target, "t1")] == ["id", "name", "precious", "note"]
    assert rows(target, T1) == [(1, "one", "gold", "noted"), (2, "two", "none", None),
                                (99, "theirs", "silver", None)]


def test_a_column_of_an_incompatible_type_is_refused_and_left_alone(stack, captured, target,
                                                                     prefix):
    execute(target, "create table t1 (id int primary key, name text, qty date)")
    refused = replicate(stack, target, prefix)
    assert_clear_error(refused, "public.t1.qty", "date", "integer", "alter column")
    assert columns(target, "t1") == [("id", "integer"), ("name", "text"), ("qty", "date")]
    assert rows(target, T1) == []


def test_a_not_null_column_the_source_cannot_fill_is_refused(stack, captured, target, prefix):
    execute(target, "create table t1 (id int primary key, name text, qty int, must text not null)")
    refused = replicate(stack, target, prefix)
    assert_clear_error(refused, "public.t1.must", "NOT NULL", "set default")
    assert rows(target, T1) == []


def test_an_empty_table_of_compatible_types_is_adopted_and_a_missing_key_refused(
        stack, captured, target, prefix):
    # bigint takes integer, varchar takes text, and the user's extra column stays null
    execute(target, "create table t1 (id bigint primary key, name varchar(40), qty int,"
                    " extra text)",
            "create table t2 (id int, amount int)")
    refused = replicate(stack, target, prefix)
    assert_clear_error(refused, "public.t2", "no primary key", "create unique index")
    execute(target, "create unique index on t2 (id)")
    adopted = replicate(stack, target, prefix)
    assert adopted.returncode == 0, adopted.stderr
    assert rows(target, T1) == [(1, "one", 10, None), (2, "two", 20, None)]
    assert columns(target, "t1")[:2] == [("id", "bigint"), ("name", "character varying(40)")]
    assert rows(target, "select * from t2") == [(1, 5)]


def test_an_adopted_table_keeps_its_rows_through_events_from_before_its_adoption(
        stack, source, prefix, start, target):
    """Issue 25, harm 2: a TRUNCATE … CASCADE and a delete in the topics from before the
    adoption remove only rows the replica wrote; the user's rows stay. Events after it apply."""
    execute(source, "create table ch (id int primary key, v text)",
            "create table kid (id int primary key, ch int references ch (id))",
            "create table dl (id int primary key, v text)",
            "insert into ch select g, 'old' from generate_series(1, 5) g",
            "insert into kid values (1, 1)",
            "insert into dl values (7, 'seven'), (8, 'eight')")
    start()
    wait_streaming(source, prefix)
    execute(source, "truncate ch cascade", "insert into ch values (1, 'new'), (2, 'new')",
            "delete from dl where id = 7")
    wait_published(source, prefix)
    # the user's own tables: ch with a row the source never had (999) and one the source has
    # (1, overwritten); dl with a row of the key the source deleted before the adoption
    execute(target, "create table ch (id int primary key, v text, mine text)",
            "insert into ch values (999, 'user', 'keep me'), (1, 'user', 'mine')",
            "create table dl (id int primary key, v text)",
            "insert into dl values (7, 'seven'), (70, 'user')")

    adopted = replicate(stack, target, prefix, "--adopt-existing")
    assert adopted.returncode == 0, adopted.stderr
    assert rows(target, "select * from ch order by id") == [
        (1, "new", "mine"), (2, "new", None), (999, "user", "keep me")]
    assert rows(target, "select * from dl order by id") == [
        (7, "seven"), (8, "eight"), (70, "user")]

    # another group reads the same history again: still nothing of the user's goes
    again = bottler("materialize", "postgres", "--target", target, "--broker", stack.kafka,
                    "--schema-registry", stack.registry_url, "--topic-prefix", prefix,
                    "--group-id", "replica2", "--once", "--adopt-existing", timeout=120)
    assert again.returncode == 0, again.stderr
    assert rows(target, "select id from ch order by id") == [(1,), (2,), (999,)]
    assert rows(target, "select id from dl order by id") == [(7,), (8,), (70,)]

    # after the adoption the table follows the source: a delete and an insert apply
    execute(source, "delete from ch where id = 1", "insert into ch values (3, 'later')",
            "delete from dl where id = 8")
    wait_published(source, prefix)
    following = replicate(stack, target, prefix)
    assert following.returncode == 0, following.stderr
    assert rows(target, "select id, v from ch order by id") == [
        (2, "new"), (3, "later"), (999, "user")]
    assert rows(target, "select id from dl order by id") == [(7,), (70,)]


@pytest.fixture
def bare_role(stack, target):
    """A login role with a password and no privilege in the target; dropped at the end."""
    name = f"rep_{uuid.uuid4().hex[:8]}"
    execute(stack.pg_dsn, f"create role {name} login password 'Pw{name}'")
    yield name
    execute(target, f"drop owned by {name}")
    execute(stack.pg_dsn, f"drop role {name}")


def test_a_replica_role_without_privileges_gets_one_line_and_leaves_nothing(
        stack, captured, target, prefix, bare_role):
    """Issue 25: a role without CREATE on the target database, then without CREATE on schema
    public: one line naming the privilege and the GRANT; no schema bottler left behind."""
    role = bare_role
    dsn = make_conninfo(target, user=role, password=f"Pw{role}")
    dbname = conninfo_to_dict(target)["dbname"]
    no_bottler = "select count(*) from pg_namespace where nspname = 'bottler'"

    refused = replicate(stack, dsn, prefix)
    assert_clear_error(refused, role, f"database {dbname}",
                       f"grant create on database {dbname} to {role}", secrets=(f"Pw{role}",))
    assert rows(target, no_bottler) == [(0,)]

    execute(target, f"grant create on database {dbname} to {role}")
    refused = replicate(stack, dsn, prefix)
    assert_clear_error(refused, role, "schema public",
                       f"grant usage, create on schema public to {role}",
                       secrets=(f"Pw{role}",))
    assert rows(target, no_bottler) == [(0,)]
    assert rows(target, "select count(*) from pg_tables where schemaname = 'public'") == [(0,)]

    execute(target, f"grant usage, create on schema public to {role}")
    granted = replicate(stack, dsn, prefix)
    assert granted.returncode == 0, granted.stderr
    assert rows(target, T1) == rows(captured, T1)
