"""`bottler migrate verify` and `bottler migrate status` against real databases and Kafka.

The target tables are created with SQL here, as the replica would create them (same names, same
column types, no foreign keys): these tests do not depend on the replica."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from bottler.migrate import postdata
from bottler.migrate import verify as verify_module
from bottler.migrate.status import status
from bottler.migrate.verify import DIFFERENT, EXTRA, MISSING, verify
from schemas.topics import table_topic
from tests.support.databases import execute, fresh_database, rows
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.stack, pytest.mark.pg_matrix]  # 15 and 18

ROOT = Path(__file__).resolve().parent.parent

SCHEMA = [
    """create table items (id int primary key, name text not null, price numeric(10, 2),
         tags text[], at timestamptz, data jsonb, blob bytea, ratio double precision)""",
    """create table lines (order_id int, n int, note varchar(40), d date,
         primary key (order_id, n))""",
    "create table words (word text primary key, n bigint)",
    "create schema sales",
    "create table sales.events (id bigint primary key, kind text)",
    "create table log (at int, msg text)",  # no primary key
    "create sequence tickets",
]

DATA = [
    """insert into items select i, 'item ' || i, i * 1.25, array['a', 'b' || i],
         timestamptz '2024-01-01 00:00:00+00' + i * interval '1 minute',
         jsonb_build_object('i', i, 'even', i % 2 = 0), decode(md5(i::text), 'hex'), i / 7.0
       from generate_series(1, 1000) i""",
    """insert into lines select o, n, 'note ' || o || '/' || n, date '2024-01-01' + o
       from generate_series(1, 50) o, generate_series(1, 4) n""",
    "insert into words values ('Zebra', 1), ('apple', 2), ('Äpfel', 3), ('banana', 4)",
    "insert into sales.events select i, 'k' || (i % 3) from generate_series(1, 300) i",
    "insert into log select i % 5, 'same ' || (i % 5) from generate_series(1, 20) i",
    "select setval('tickets', 7)",
]


@pytest.fixture
def pair(stack):
    """A source and a target database holding the same tables and rows."""
    with fresh_database(stack.pg_dsn) as source, fresh_database(stack.pg_dsn) as target:
        execute(source, *SCHEMA, *DATA)
        execute(target, *SCHEMA, *DATA)
        # Another time zone and date style in the target must not change any text form.
        name = target.rsplit("/", 1)[1]
        execute(target, f"alter database {name} set timezone = 'Asia/Tokyo'",
                f"alter database {name} set datestyle = 'SQL, DMY'")
        yield source, target


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bottler", "migrate", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def by_table(report):
    return {t.qualified: t for t in report.tables}


def test_identical_databases_verify(pair):
    source, target = pair
    report = verify(source, target)
    assert report.identical, [(t.qualified, t.problems, t.differences) for t in report.tables]
    tables = by_table(report)
    assert set(tables) == {"public.items", "public.lines", "public.words", "sales.events",
                           "public.log"}
    assert tables["public.items"].source_rows == tables["public.items"].target_rows == 1000
    assert tables["public.lines"].target_rows == 200
    assert not tables["public.log"].keyed and tables["public.log"].identical
    # Small ranges: the same answer through many primary-key ranges.
    assert verify(source, target, chunk_rows=7).identical

    done = run_cli("verify", "--source", source, "--target", target)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all 5 tables identical" in done.stdout
    assert "✗" not in done.stdout
    assert report.sequences_behind == {} and "sequences" not in done.stdout

    # Sequences are not carried by the replica: verify points out those behind, as a note.
    execute(source, "select setval('tickets', 70)")
    report = verify(source, target)
    assert report.identical and report.sequences_behind == {"public.tickets": (70, 7)}


def test_changed_deleted_and_added_rows_are_listed(pair):
    source, target = pair
    execute(target,
            "update items set price = price + 0.01 where id = 500",
            "delete from items where id = 17",
            "insert into items (id, name) values (1001, 'extra')",
            "update lines set note = 'changed' where order_id = 7 and n = 3",
            "delete from words where word = 'Äpfel'",
            "update sales.events set kind = null where id = 300")
    for chunk_rows in (100_000, 10):
        report = verify(source, target, chunk_rows=chunk_rows)
        assert not report.identical
        tables = by_table(report)
        items = tables["public.items"]
        assert not items.identical
        assert sorted((d.kind, d.key) for d in items.differences) == [
            (DIFFERENT, "id=500"), (EXTRA, "id=1001"), (MISSING, "id=17")]
        assert (items.source_rows, items.target_rows) == (1000, 1000)
        assert [(d.kind, d.key) for d in tables["public.lines"].differences] == [
            (DIFFERENT, "order_id=7, n=3")]
        assert [(d.kind, d.key) for d in tables["public.words"].differences] == [
            (MISSING, "word=Äpfel")]
        assert [(d.kind, d.key) for d in tables["sales.events"].differences] == [
            (DIFFERENT, "id=300")]
        assert tables["public.log"].identical

    # --max-keys bounds the list, not the counts.
    items = by_table(verify(source, target, tables=["items"], max_keys=1)).get("public.items")
    assert len(items.differences) == 1 and sum(items.difference_counts.values()) == 3

    done = run_cli("verify", "--source", source, "--target", target, "--tables",
                   "public.items", "--tables", "sales.events")
    assert done.returncode == 1, done.stdout + done.stderr
    for text in ("id=500", "id=1001", "id=17", "missing in target", "extra in target",
                 "2 of 2 tables differ"):
        assert text in done.stdout, done.stdout
    assert "lines" not in done.stdout  # only the tables asked for


def test_missing_table_and_columns(pair):
    source, target = pair
    execute(target, "drop table sales.events", "alter table lines drop column d",
            "create table only_here (id int)")
    report = verify(source, target)
    tables = by_table(report)
    assert not tables["sales.events"].exists_in_target
    assert not tables["sales.events"].identical
    assert tables["sales.events"].source_rows == 300
    assert not tables["public.lines"].identical
    assert tables["public.lines"].problems == ["columns missing in target: d"]
    assert tables["public.items"].identical
    assert report.target_only == ["public.only_here"]
    done = run_cli("verify", "--source", source, "--target", target)
    assert done.returncode == 1
    assert "missing in target" in done.stdout and "sales.events" in done.stdout


def test_table_without_primary_key(pair):
    source, target = pair
    # Same rows in another physical order: still identical.
    execute(target, "delete from log where at = 2",
            "insert into log select 2, 'same 2' from generate_series(1, 4)")
    report = verify(source, target, tables=["log"])
    assert report.identical
    # One copy of a duplicated row gone, one new row: counts equal, contents not.
    execute(target, "delete from log where ctid = (select min(ctid) from log where at = 3)",
            "insert into log values (9, 'new')")
    log = by_table(verify(source, target, tables=["log"]))["public.log"]
    assert not log.identical
    assert log.source_rows == log.target_rows == 20
    assert sorted((d.kind, d.key) for d in log.differences) == [
        (EXTRA, "(9,new)"), (MISSING, '(3,"same 3")')]


def test_errors_exit_2_without_password(stack, pair):
    source, _ = pair
    bad = source.replace("@", ":hunter2@", 1) if "@" in source else source
    bad = bad.rsplit("/", 1)[0] + "/no_such_database"
    done = run_cli("verify", "--source", source, "--target", bad)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot connect" in done.stderr and "hunter2" not in done.stderr + done.stdout
    done = run_cli("verify", "--source", source, "--target", source, "--tables", "nope.nothing")
    assert done.returncode == 2
    assert "nope.nothing does not exist" in done.stderr


def test_a_table_read_aborted_by_a_deadlock_is_verified_again(pair, monkeypatch):
    """The replica applying a DDL on the target while verify reads it: verify holds a share
    lock on the table it read first (items), the DDL's transaction an exclusive one on the next
    (words) and wants items too. PostgreSQL aborts verify's read (the last to join the cycle,
    the DDL's session waiting longer to check), verify rolls back and reads words again."""
    source, target = pair
    ddl = psycopg.connect(target)
    ddl.execute("set deadlock_timeout = '60s'")  # verify, not the DDL, is the one aborted
    ddl.execute("lock table words")
    compare, paused = verify_module._compare_table, []

    def ddl_waiting_on_items() -> bool:
        return rows(target, "select 1 from pg_locks where relation = 'items'::regclass"
                            " and not granted") != []

    def pausing(src, dst, pool, info, *args):
        if info.name == "words" and not paused:  # once items is read: the DDL wants it
            paused.append(True)
            wait_for(ddl_waiting_on_items, 30, "the DDL to wait for items")
        return compare(src, dst, pool, info, *args)

    monkeypatch.setattr(verify_module, "_compare_table", pausing)
    with ddl, ThreadPoolExecutor(1) as pool:
        report = pool.submit(verify, source, target, tables=["items", "words"])
        wait_for(lambda: paused, 30, "verify to read items")
        ddl.execute("lock table items")  # granted once verify rolls back
        ddl.commit()
        report = report.result(60)
    assert report.identical


@pytest.mark.pg_single  # no database
def test_a_deadlock_rolls_both_sides_back_and_retries(monkeypatch):
    monkeypatch.setattr(verify_module, "DEADLOCK_BACKOFF", 0)
    rolled_back, calls = [], []

    class Conn:
        def rollback(self):
            rolled_back.append(self)

    sides = (verify_module._Side(Conn(), "source"), verify_module._Side(Conn(), "target"))

    def read(fail: int):
        calls.append(True)
        if len(calls) <= fail:
            raise psycopg.errors.DeadlockDetected("deadlock detected")
        return "read"

    assert verify_module._retrying(lambda: read(1), sides) == "read"
    assert len(calls) == 2 and rolled_back == [s.conn for s in sides]
    calls.clear()
    with pytest.raises(psycopg.errors.DeadlockDetected):  # the last attempt's error
        verify_module._retrying(lambda: read(verify_module.DEADLOCK_ATTEMPTS), sides)
    assert len(calls) == verify_module.DEADLOCK_ATTEMPTS


@pytest.mark.pg_single  # its kind is checked on both majors by the others: the suite's time
def test_200k_rows_verify_in_seconds(stack):
    with fresh_database(stack.pg_dsn) as source, fresh_database(stack.pg_dsn) as target:
        schema = ("create table big (id bigint primary key, name text, amount numeric(12, 2),"
                  " at timestamptz, flag boolean)")
        fill = ("insert into big select i, 'name ' || i, i * 0.37,"
                " timestamptz '2024-01-01' + i * interval '1 second', i % 3 = 0"
                " from generate_series(1, 200000) i")
        for dsn in (source, target):
            execute(dsn, schema, fill, "vacuum analyze big")
        started = time.monotonic()
        report = verify(source, target)
        seconds = time.monotonic() - started
        print(f"verify of 200,000 identical rows: {seconds:.2f}s")
        assert report.identical
        assert report.tables[0].source_rows == 200_000
        assert seconds < 10, seconds

        execute(target, "update big set flag = not flag where id = 123456")
        started = time.monotonic()
        report = verify(source, target)
        seconds = time.monotonic() - started
        print(f"verify of 200,000 rows with one difference: {seconds:.2f}s")
        assert [(d.kind, d.key) for d in report.tables[0].differences] == [
            (DIFFERENT, "id=123456")]
        assert seconds < 10, seconds


OFFSETS_DDL = """create table bottler.offsets (group_id text, topic text, partition int,
    next_offset bigint, primary key (group_id, topic, partition))"""


def test_status_reports_lag(stack, pair):
    source, target = pair
    prefix = f"m{uuid.uuid4().hex[:8]}"
    items, events = table_topic(prefix, "public", "items"), table_topic(prefix, "sales", "events")
    assert events == f"{prefix}.sales.events"
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    futures = admin.create_topics([NewTopic(items, 2, 1), NewTopic(events, 1, 1)])
    for future in futures.values():
        future.result(30)
    producer = Producer({"bootstrap.servers": stack.kafka})
    for i in range(10):
        producer.produce(items, key=str(i), value=b"x", partition=i % 2)
    for i in range(4):
        producer.produce(events, key=str(i), value=b"y", partition=0)
    assert producer.flush(30) == 0

    # No offsets table yet: nothing is consumed, everything is lag.
    report = status(source, target, stack.kafka, prefix, exact=True)
    assert not report.offsets_table and not report.caught_up
    tables = {t.qualified: t for t in report.tables}
    assert tables["public.items"].lag == 10 and tables["sales.events"].lag == 4
    assert tables["public.lines"].topic_exists is False  # no topic: not caught up
    assert tables["public.items"].source_rows == 1000 and tables["public.items"].source_exact

    execute(target, "create schema bottler", OFFSETS_DDL,
            f"""insert into bottler.offsets values
                ('bottler-postgres', '{items}', 0, 5), ('bottler-postgres', '{items}', 1, 2),
                ('bottler-postgres', '{events}', 0, 4), ('other', '{items}', 1, 5)""")
    report = status(source, target, stack.kafka, prefix, tables=["items", "sales.events"])
    tables = {t.qualified: t for t in report.tables}
    assert tables["public.items"].end_offsets == {0: 5, 1: 5}
    assert tables["public.items"].stored_offsets == {0: 5, 1: 2}
    assert tables["public.items"].lag == 3
    assert tables["sales.events"].lag == 0 and tables["sales.events"].caught_up
    assert report.lag == 3 and not report.caught_up

    execute(target, "update bottler.offsets set next_offset = 5 where topic = "
                    f"'{items}' and group_id = 'bottler-postgres'")
    report = status(source, target, stack.kafka, prefix, tables=["items", "sales.events"])
    assert report.lag == 0 and report.caught_up
    # Another group has not caught up.
    assert status(source, target, stack.kafka, prefix, group="other",
                  tables=["items"]).tables[0].lag == 5

    done = run_cli("status", "--source", source, "--target", target, "--broker", stack.kafka,
                   "--prefix", prefix, "--tables", "items,sales.events", "--exact")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "caught up: yes" in done.stdout
    assert items in done.stdout
    assert rows(target, "select count(*) from bottler.offsets") == [(4,)]


def test_the_cutover_never_moves_a_target_sequence_backwards(pair):
    """Issue 25, the same class as the views' harms: the cutover sets the target's sequences
    from the source's, but one the target already used past them keeps its value (setting it
    back would hand out its ids again)."""
    import psycopg

    from bottler.migrate.definitions import carry

    source, target = pair
    execute(source, "create sequence orders_id", "select setval('orders_id', 50)",
            "select setval('tickets', 70)")
    execute(target, "create sequence orders_id", "select setval('orders_id', 900)")
    with psycopg.connect(source, autocommit=True) as src, \
            psycopg.connect(target, autocommit=True) as dst:
        done = carry(src, dst, margin=10, progress=lambda line: None)
    assert rows(target, "select last_value from orders_id") == [(900,)]
    assert rows(target, "select last_value from tickets") == [(80,)]  # behind: moved forward
    assert any("orders_id kept at 900" in note for note in done.notes)


def test_the_cutover_notes_each_generated_column_the_target_does_not_generate(pair):
    """A generated column of the source: plain in the target (the replica wrote the values
    PostgreSQL 18 publishes) or missing (15 does not publish it) is noted; one the target
    generates too is not."""
    import psycopg

    from bottler.migrate.definitions import carry

    source, target = pair
    generated = "int generated always as (a * 2) stored"
    execute(source, *(f"create table {t} (id int primary key, a int, b {generated})"
                      for t in ("g_both", "g_plain", "g_missing")))
    execute(target, f"create table g_both (id int primary key, a int, b {generated})",
            "create table g_plain (id int primary key, a int, b int)",
            "create table g_missing (id int primary key, a int)")
    with psycopg.connect(source, autocommit=True) as src, \
            psycopg.connect(target, autocommit=True) as dst:
        done = carry(src, dst, progress=lambda line: None)
    notes = [n for n in done.notes if "generated column" in n]
    assert len(notes) == 2, notes
    assert "public.g_plain.b is a generated column in the source and a plain one" in notes[0] + \
        notes[1]
    assert "public.g_missing.b is a generated column in the source and missing" in notes[0] + \
        notes[1]


def test_post_data_leaves_out_a_setting_the_target_does_not_know(source):
    """A pg_dump newer than the target dumps settings the target lacks (17's
    transaction_timeout, for a target of 16): the rest of the post-data still applies."""
    execute(source, "create table t (id int primary key, v int)")
    dump = ("SET statement_timeout = 0;\nSET bottler_no_such_setting = 0;\n"
            "SELECT pg_catalog.set_config('search_path', '', false);\n\n"
            "--\n-- Name: t_v; Type: INDEX; Schema: public; Owner: postgres\n--\n\n"
            "CREATE INDEX t_v ON public.t USING btree (v);\n")
    with psycopg.connect(source, autocommit=True) as conn:
        done = postdata.apply(conn, dump, progress=lambda line: None)
    assert [(e.label, e.outcome) for e in done.entries] == [("INDEX public.t_v", "created")]
    assert rows(source, "select indexname from pg_indexes where indexname = 't_v'") == [("t_v",)]
