"""Capture from a hot standby (PostgreSQL 16+, here 18): the slot, its exported snapshot and the
stream are the standby's, what the capture writes goes to the primary (--primary), and the topic
holds every row written on the primary before and while the capture started (a transaction
larger than logical_decoding_work_mem streamed while it ran, as on a primary), each once
(docs/operations.md, capture from a standby). Each bad setup is refused in one line, leaving
nothing on either server nor in Kafka."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading

import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from capture.run import run_capture
from capture.settings import load_settings
from capture.snapshot.request import request_snapshot
from capture.source import standby as standby_source
from common.errors import BottlerError
from schemas.topics import HEARTBEAT, with_prefix
from tests.support.capture import CaptureThread, start_capture
from tests.support.cli import ROOT, assert_clear_error, bottler, clean_env
from tests.support.databases import fresh_database
from tests.support.replica import converge, replica
from tests.support.standby import DB, primary_and_standby, replayed
from tests.support.topics import Decoder, copied, read_committed, read_topic
from tests.support.waiting import wait_for, wait_streaming

pytestmark = pytest.mark.pg18  # servers of its own: PostgreSQL 18 (and 15 for its refusal)

BIG = 100_000  # rows: a snapshot of some seconds, in chunks of CHUNK_PAGES (killed mid-way)


@pytest.fixture(scope="module")
def servers(stack):
    with primary_and_standby(stack.stack.password) as (primary, standby):
        with psycopg.connect(standby.dsn(DB), autocommit=True) as conn:  # the least there is:
            conn.execute("alter system set logical_decoding_work_mem = '64kB'")  # streamed
            conn.execute("select pg_reload_conf()")
        yield primary, standby


def settings(stack, prefix: str, standby, primary=None) -> dict:
    return dict(postgres=standby.dsn(DB), primary=primary and primary.dsn(DB),
                broker=stack.kafka, schema_registry=stack.registry_url, slot=prefix,
                topic_prefix=prefix, heartbeat_interval=1.0, snapshot_workers=1,
                stream_large_transactions="on")


def write(dsn: str, table: str, stop: threading.Event, updated: set[int]) -> None:
    """New rows, and updates of the first 2000, one small transaction at a time."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        n = 2000
        while not stop.wait(0.005):
            n += 1
            conn.execute(f"insert into {table} values (%s, 0)", (n,))
            old = random.randint(1, 2000)
            conn.execute(f"update {table} set n = n + 1 where id = %s", (old,))
            updated.add(old)


def test_the_capture_decodes_on_the_standby(stack, servers, prefix):
    primary, standby = servers
    table, later = f"items_{prefix}", f"later_{prefix}"
    with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:
        conn.execute(f"create table {table} (id int primary key, n int)")
        conn.execute(f"insert into {table} select g, 0 from generate_series(1, 2000) g")
    stop, updated = threading.Event(), set()
    writer = threading.Thread(target=write, args=(primary.dsn(DB), table, stop, updated))
    writer.start()  # before the capture: rows land before, during and after its slot's snapshot
    capture = CaptureThread(**settings(stack, prefix, standby, primary)).start()
    try:
        wait_streaming(standby.dsn(DB), prefix, 120)
        with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:  # joins while streaming
            conn.execute(f"create table {later} (id int primary key)")
            conn.execute(f"insert into {later} select generate_series(1, 500)")
            conn.execute(f"insert into {table} select g, 7 from generate_series(-5000, -1) g")
        wait_for(lambda: len(updated) > 100, 60, "updates while the capture streams")
    finally:
        stop.set()
        writer.join(30)
    try:
        decoder = Decoder(stack.registry_url)
        wait_for(lambda: replayed(primary, standby), 60, "the standby to replay every write")
        with psycopg.connect(standby.dsn(DB)) as conn:
            rows = dict(conn.execute(f"select id, n from {table}").fetchall())
            slots = {r[0] for r in conn.execute("select slot_name from pg_replication_slots")}
        with psycopg.connect(primary.dsn(DB)) as conn:
            assert not conn.execute("select 1 from pg_replication_slots where slot_name = %s",
                                    (prefix,)).fetchall()  # decoded on the standby only
            assert conn.execute("select 1 from pg_publication where pubname = %s",
                                (prefix,)).fetchall()  # created on the primary
        assert prefix in slots
        with psycopg.connect(standby.dsn(DB)) as conn:  # the large one streamed (protocol 4)
            assert conn.execute("select stream_bytes > 0 from pg_stat_replication_slots "
                                "where slot_name = %s", (prefix,)).fetchone() == (True,)

        def topic(name: str) -> list:  # streamed transactions come in Kafka transactions
            return read_committed(stack.kafka, f"{prefix}.{name}")

        def state(messages) -> dict[int, int]:
            return {k[0][1]: v["n"] for k, v in decoder.table_state(messages).items()}

        wait_for(lambda: state(topic(table)) == rows, 120, "every row of the primary")
        wait_for(lambda: {decoder.key(m)["id"] for m in topic(later)} == set(range(1, 501)),
                 120, "the table that joined, copied")
        counts: dict[int, int] = {}
        for m in topic(table):
            counts[decoder.key(m)["id"]] = counts.get(decoder.key(m)["id"], 0) + 1
        doubled = {i: c for i, c in counts.items() if c > 1 and i not in updated}
        assert not doubled  # snapshot and stream meet at the slot's consistent point: each once
        assert read_committed(stack.kafka, with_prefix(prefix, HEARTBEAT))  # written on the primary
        # asked on the standby (its slot), written on the primary (read-only standby)
        request_snapshot(standby.dsn(DB), prefix, later, primary.dsn(DB))
        wait_for(lambda: len(topic(later)) >= 1000, 120, "the table re-published")
        with psycopg.connect(primary.dsn(DB)) as conn:  # no more writes: heartbeats only
            now = conn.execute("select pg_current_wal_lsn()::text").fetchone()[0]

        def moved() -> bool:  # the quiet slot moves on the heartbeats written on the primary
            with psycopg.connect(standby.dsn(DB)) as conn:
                return conn.execute("select confirmed_flush_lsn >= %s::pg_lsn from "
                                    "pg_replication_slots where slot_name = %s",
                                    (now, prefix)).fetchone()[0]
        wait_for(moved, 60, "the standby's slot confirmed past the last write")
        capture.stop()
        with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:  # while it is stopped
            conn.execute(f"update {table} set n = -1 where id between 1 and 100")
        capture = CaptureThread(**settings(stack, prefix, standby, primary)).start()
        wait_for(lambda: sum(v == -1 for v in state(topic(table)).values()) == 100, 120,
                 "the changes made while it was stopped, from the standby's slot")
    finally:
        capture.stop()


def test_a_snapshot_killed_on_the_standby_resumes(stack, servers, prefix, tmp_path):
    """`kill -9` of the capture and its workers in the middle of the standby's snapshot, rows
    written on the primary while it is down: the restart resumes the snapshot (a new snapshot
    of the standby's, the copied chunks skipped) and every row arrives, duplicates allowed."""
    primary, standby = servers
    with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:
        conn.execute("create table big (id int primary key, pad text)")
        conn.execute(f"insert into big select g, repeat('p', 80) from generate_series(1, {BIG}) g")
    wait_for(lambda: replayed(primary, standby), 60, "the standby to replay the table")
    log_path, topic = tmp_path / "capture.log", f"{prefix}.big"
    log = open(log_path, "ab")  # noqa: SIM115 - closed below
    proc = start_capture(stack, standby.dsn(DB), prefix, log, "--primary", primary.dsn(DB))
    try:
        def mid_snapshot():
            assert proc.poll() is None, log_path.read_text()[-3000:]
            return copied(stack, topic) >= BIG // 10
        wait_for(mid_snapshot, 120, "the snapshot to be under way")
        os.killpg(proc.pid, signal.SIGKILL)  # the capture and its workers, like a lost host
        proc.wait(30)
        assert copied(stack, topic) < BIG, "the snapshot ended before the kill"
        with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:  # while it is down
            conn.execute("update big set pad = 'changed' where id % 1000 = 0")
            conn.execute(f"insert into big select g, 'new' from generate_series({BIG + 1}, "
                         f"{BIG + 100}) g")
        proc = start_capture(stack, standby.dsn(DB), prefix, log, "--primary", primary.dsn(DB))
        wait_streaming(standby.dsn(DB), prefix, 180)
        assert "resuming the snapshot" in log_path.read_text()
        decoder = Decoder(stack.registry_url)

        def pads() -> dict[int, str]:
            state = decoder.table_state(read_topic(stack.kafka, topic))
            return {dict(key)["id"]: row["pad"] for key, row in state.items()}
        with psycopg.connect(primary.dsn(DB)) as conn:
            expected = dict(conn.execute("select id, pad from big").fetchall())
        # at least a message per row, and one per change made while it was down (a snapshot
        # copied those rows before or after: the stream from the slot's position has them too)
        least = BIG + BIG // 1000 + 100
        wait_for(lambda: copied(stack, topic) >= least, 120, "the topic to fill")
        wait_for(lambda: pads() == expected, 120, "every row, each with its last value")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        log.close()


def test_the_cutover_reads_the_standby_and_fences_on_the_primary(stack, servers, prefix):
    """A migration whose capture decodes on the standby: `bottler migrate cutover` given the
    standby alone refuses in one line naming --primary; given the standby as --source (its
    slot) and the primary as --primary (where the fence is written and the application's role
    fenced out), it says go."""
    primary, standby = servers
    db, app = f"cut_{prefix}", f"app_{prefix}"  # a database of its own: the module's others
    with psycopg.connect(primary.dsn(), autocommit=True) as conn:  # hold large tables
        conn.execute(f"create database {db}")
        conn.execute(f"create role {app} login")
    with psycopg.connect(primary.dsn(db), autocommit=True) as conn:
        conn.execute("create table orders (id int generated by default as identity primary "
                     "key, note text)")
        conn.execute("insert into orders (note) select 'o' || g from generate_series(1, 300) g")
    wait_for(lambda: replayed(primary, standby), 60, "the standby to replay the database")
    capture = CaptureThread(**settings(stack, prefix, standby, primary)
                            | dict(postgres=standby.dsn(db), primary=primary.dsn(db))).start()
    cutover = ["migrate", "cutover", "-s", standby.dsn(db), "-b", stack.kafka, "-p", prefix,
               "--slot", prefix, "-g", prefix, "--fence-timeout", "120"]
    try:
        with fresh_database(stack.pg_dsn) as target:
            alone = bottler(*cutover, "-t", target)
            assert_clear_error(alone, "the source is a standby", "pass --primary",
                               secrets=(stack.stack.password,))
            with replica(stack, target, prefix, group=prefix) as (_, _, failure):
                converge(standby.dsn(db), target, ["select * from orders order by id"], failure,
                         120)
                run = subprocess.Popen(
                    [sys.executable, "-m", "bottler", *cutover, "-t", target, "--primary",
                     primary.dsn(db), "--fence-roles", app], stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=clean_env(COLUMNS="200"))
                out = []
                for line in run.stdout:  # the replica stops when the cutover asks for it
                    out.append(line)
                    if "stop `bottler materialize postgres`" in line:
                        break
            out.append(run.stdout.read())
            run.wait(60)
            assert "verdict: go" in "".join(out), "".join(out)
            with psycopg.connect(primary.dsn(db)) as conn:  # fenced out of the primary
                assert conn.execute("select rolconnlimit from pg_roles where rolname = %s",
                                    (app,)).fetchone() == (0,)
            with psycopg.connect(target) as conn:  # its sequence carried over, at the fence
                assert conn.execute("insert into orders (note) values ('new') returning id"
                                    ).fetchone() == (301,)
    finally:
        capture.stop()


def refused(stack, prefix: str, standby, primary=None) -> BottlerError:
    """The capture's start fails in one line and leaves nothing behind."""
    with pytest.raises(BottlerError) as failed:
        run_capture(load_settings(**settings(stack, prefix, standby, primary)))
    assert "\n" not in failed.value.message
    with psycopg.connect(standby.dsn(DB)) as conn:
        assert not conn.execute("select 1 from pg_replication_slots where slot_name = %s",
                                (prefix,)).fetchall()
    with psycopg.connect((primary or standby).dsn(DB)) as conn:
        assert not conn.execute("select 1 from pg_publication where pubname = %s",
                                (prefix,)).fetchall()
    topics = AdminClient({"bootstrap.servers": stack.kafka}).list_topics(timeout=10).topics
    assert not [t for t in topics if t.startswith(prefix)]
    return failed.value


def test_a_standby_source_needs_its_primary(stack, servers, prefix):
    primary, standby = servers
    assert "pass --primary" in refused(stack, prefix, standby).hint
    assert "is a standby too" in refused(stack, prefix, standby, standby).message


def test_a_standby_without_feedback_is_refused(stack, servers, prefix):
    primary, standby = servers

    def feedback(value: str) -> None:
        with psycopg.connect(standby.dsn(DB), autocommit=True) as conn:
            conn.execute("alter system reset hot_standby_feedback" if value == "on"
                         else "alter system set hot_standby_feedback = off")
            conn.execute("select pg_reload_conf()")

        def applied():
            with psycopg.connect(standby.dsn(DB)) as conn:
                return conn.execute("show hot_standby_feedback").fetchone()[0] == value
        wait_for(applied, 30, f"hot_standby_feedback {value}")

    feedback("off")
    try:
        assert "hot_standby_feedback" in refused(stack, prefix, standby, primary).message
    finally:
        feedback("on")


def test_a_start_that_fails_removes_what_it_made_on_the_primary(stack, servers, prefix,
                                                                monkeypatch):
    """The standby does not replay the capture's new publication in time: the start fails,
    the publication is dropped on the primary, the topics go."""
    primary, standby = servers
    monkeypatch.setattr(standby_source, "REPLAY_TIMEOUT", 2.0)
    with psycopg.connect(standby.dsn(DB), autocommit=True) as conn:
        conn.execute("select pg_wal_replay_pause()")
        try:
            error = refused(stack, prefix, standby, primary)
        finally:
            conn.execute("select pg_wal_replay_resume()")
    assert "the standby has not replayed the capture's publications" in error.message


def test_a_primary_without_logical_wal_is_refused(stack, prefix):
    """The standby's configuration is a copy of the primary's: the primary's is named first."""
    with primary_and_standby(stack.stack.password, wal_level="replica") as (p, s):
        error = refused(stack, prefix, s, p)
    assert "the primary has wal_level = replica" in error.message


def test_a_standby_of_postgresql_15_is_refused(stack, prefix):
    with primary_and_standby(stack.stack.password, version="15") as (p, s):
        error = refused(stack, prefix, s, p)
    assert "needs PostgreSQL 16" in error.message
