"""Failover slots (PostgreSQL 17+: 18, and 17 where the version matrix names it): the primary
killed under a write load and its standby promoted, the capture (restarted as a supervisor
would) resumes on the standby from the synchronized copy of its slot, and every row of the
promoted server is in the table topic, none that it lacks, and in the replica and the search
view fed from it; a
promotion whose standby has no copy of the slot stops the capture in one line; `bottler status`
names each setting a failover would miss (docs/operations.md, high availability)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from bottler.status.slots import SlotReader
from compose.postgres import PostgresCluster
from materializers.search import indices
from materializers.search.sink import SearchSink
from tests.support.capture import capture_process
from tests.support.cli import assert_clear_error, bottler
from tests.support.matrix import PG_MATRIX
from tests.support.replica import converge, materializer, replica
from tests.support.search_api import hits
from tests.support.standby import DB
from tests.support.standby import primary_and_standby as standby_pair
from tests.support.topics import Decoder, read_topic
from tests.support.waiting import in_thread, wait_for, wait_streaming

pytestmark = pytest.mark.pg18  # failover slots: servers of its own, PostgreSQL 18

# Failover slots came with 17: its servers run 18, and 17 too where the version matrix names it
# (make test-pg-matrix).
MAJORS = ["17"] * ("17" in PG_MATRIX) + ["18"]


@pytest.fixture(params=MAJORS, ids=lambda major: f"pg{major}")
def primary_and_standby(request, stack) -> Iterator[tuple[PostgresCluster, PostgresCluster]]:
    """A primary and its physical standby (slot sync on), the standby in the primary's
    synchronized_standby_slots, commits waiting for it (synchronous replication: what a
    primary acknowledged, the standby has)."""
    with standby_pair(stack.stack.password, request.param,
                      standby_settings="sync_replication_slots = on\n") as (primary, standby):
        with psycopg.connect(primary.dsn(), autocommit=True) as conn:
            conn.execute("alter system set synchronized_standby_slots = 'standby1'")
            conn.execute("alter system set synchronous_standby_names = '*'")
            conn.execute("select pg_reload_conf()")
        yield primary, standby


class Supervised:
    """`bottler capture` restarted whenever it exits, as `bottler stack`'s supervisor does."""

    def __init__(self, args: list[str], log: Path):
        self.args, self.log, self.exits = args, log, []
        self.proc = capture_process(args, log)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stop.wait(0.5):
            if self.proc.poll() is not None:
                self.exits.append(self.proc.returncode)
                self.proc = capture_process(self.args, self.log)

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.proc.terminate()
        self.proc.wait(30)


# One transaction per row: a new row, the row before it updated, and every third time the row
# two before it deleted (one statement, so one commit: acknowledged or not as a whole).
WRITE = """
with new as (insert into items values (%(n)s, 0)),
     changed as (update items set v = v + 1 where id = %(n)s - 1)
delete from items where id = %(n)s - 2 and %(n)s %% 3 = 0
"""


def load(dsn: str, stop: threading.Event, acknowledged: list[int]) -> None:
    """Transactions through whichever server takes writes; one whose commit failed may or may
    not have happened, so only acknowledged ones are counted."""
    n = 0
    while not stop.is_set():
        try:
            with psycopg.connect(dsn, connect_timeout=2, autocommit=True) as conn:
                while not stop.is_set():
                    n += 1
                    conn.execute(WRITE, {"n": n})
                    acknowledged.append(n)
                    time.sleep(0.05)
        except psycopg.Error:
            time.sleep(0.2)


def test_the_capture_resumes_on_the_promoted_standby_from_the_synchronized_slot(
        stack, primary_and_standby, target, prefix, tmp_path):
    """Under a load of inserts, updates and deletes across the kill and the promotion: the
    table topic ends with exactly the promoted server's rows (duplicates allowed, none
    missing, none it lacks), and the replica and the search view fed from it end equal to the
    promoted server."""
    primary, standby = primary_and_standby
    with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:
        conn.execute("create table items (id int primary key, v int not null)")
    password = stack.stack.password
    both = (f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} dbname={DB} "
            f"user=postgres password={password} target_session_attrs=read-write")
    capture = Supervised(["-d", both, "-s", prefix, "-b", stack.kafka, "-r", stack.registry_url,
                          "-p", prefix, "--heartbeat-interval", "1"], tmp_path / "capture.log")
    stop, acknowledged = threading.Event(), []
    writer = threading.Thread(target=load, args=(both, stop, acknowledged), daemon=True)
    search = SearchSink(stack.search_url, prefix)  # the views, fed throughout
    with replica(stack, target, prefix) as (_, _, failure), \
            in_thread(materializer(stack, search, prefix).run) as search_failure:
        try:
            wait_streaming(primary.dsn(DB), prefix)
            writer.start()
            wait_for(lambda: synced(standby.dsn(DB), prefix), 120,
                     "the standby's synchronized copy of the slot")
            before = len(acknowledged)
            wait_for(lambda: len(acknowledged) > before + 20, 60, "rows written after the sync")
            os.kill(primary.running_pid(), signal.SIGKILL)
            with psycopg.connect(standby.dsn(DB), autocommit=True) as conn:
                assert conn.execute("select pg_promote()").fetchone() == (True,)
            wait_streaming(standby.dsn(DB), prefix, 120)
            after = len(acknowledged)
            wait_for(lambda: len(acknowledged) > after + 20, 60, "rows written on the new primary")
            stop.set()
            writer.join(30)
            log = (tmp_path / "capture.log").read_text()
            assert capture.exits, "the capture never exited when its primary died:\n" + log[-3000:]
            promoted = standby.dsn(DB)
            with psycopg.connect(promoted) as conn:
                in_database = dict(conn.execute("select id, v from items").fetchall())
            # synchronous replication: every acknowledged row no later commit deleted is there
            assert {n for n in acknowledged if (n + 2) % 3} <= in_database.keys()
            # none missing, none the new primary lacks (synchronized_standby_slots); the capture
            # runs until then: stopped before it read the last commits, it would never send them
            published = Published(stack, f"{prefix}.items")
            wait_for(lambda: published.read() == in_database or published.still(120), 900,
                     "the promoted server's rows in Kafka")
            assert published.rows == in_database, published.differences(in_database)
        finally:
            stop.set()
            writer.join(30)
            capture.close()
        converge(promoted, target, ["select id, v from items order by id"], failure, 120)

        def searched() -> dict[int, int]:
            assert not search_failure, search_failure
            return {hit["_source"]["id"]: hit["_source"]["v"]
                    for hit in hits(search.client, prefix, size=10_000)}
        try:
            wait_for(lambda: searched() == in_database, 120, "the search view's documents")
        finally:
            indices.delete_index(search.client, prefix)


class Published:
    """A table topic's rows as its log has them now (``read``), and whether they have stopped
    changing for a while (``still``): a capture behind on a busy machine is waited for while it
    publishes, not for a fixed time."""

    def __init__(self, stack, topic: str):
        self.stack, self.topic = stack, topic
        self.decoder = Decoder(stack.registry_url)
        self.rows: dict[int, int] = {}
        self._changed = time.monotonic()

    def read(self) -> dict[int, int]:
        state = self.decoder.table_state(read_topic(self.stack.kafka, self.topic))
        rows = {dict(key)["id"]: row["v"] for key, row in state.items()}
        if rows != self.rows:
            self.rows, self._changed = rows, time.monotonic()
        return rows

    def still(self, seconds: float) -> bool:
        return time.monotonic() - self._changed > seconds

    def differences(self, expected: dict[int, int]) -> str:
        missing = sorted(expected.keys() - self.rows.keys())
        extra = sorted(self.rows.keys() - expected.keys())
        other = sorted(k for k in expected.keys() & self.rows.keys()
                       if expected[k] != self.rows[k])
        return (f"the topic differs from the promoted server: {len(missing)} rows missing "
                f"{missing[:10]}, {len(extra)} it lacks {extra[:10]}, {len(other)} with another "
                f"value {other[:10]}")


def synced(dsn: str, slot: str) -> bool:
    """The standby's copy of ``slot`` as `bottler status` shows it, and persistent (not a
    temporary copy, which promotion drops)."""
    copy = [s for s in SlotReader(dsn).read() if s.name == slot]
    with psycopg.connect(dsn) as conn:
        temporary = conn.execute("select temporary from pg_replication_slots "
                                 "where slot_name = %s", (slot,)).fetchone()
    return bool(copy and copy[0].failover and copy[0].synced and temporary == (False,))


def test_status_names_each_setting_a_failover_would_miss(primary_and_standby):
    """`bottler status` given the primary and the standby: nothing to say once the failover
    slot has its synchronized copy; then, the standby left out of synchronized_standby_slots,
    its feedback and slot sync off, one line for each, saying what to set."""
    primary, standby = primary_and_standby
    both = ("-d", primary.dsn(DB), "--standby", standby.dsn(DB))
    with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:
        conn.execute("select pg_create_logical_replication_slot('kept', 'pgoutput', false, "
                     "false, true)")  # a failover slot, as the capture makes it

    def failover_lines(*args: str) -> list[str]:
        """The problems shown, each one line (joined again where the console wrapped it)."""
        shown = bottler("status", "--once", *args)
        assert shown.returncode == 0, shown.stdout + shown.stderr
        lines: list[str] = []
        for line in shown.stdout.split("\nProcesses")[0].splitlines():
            if line.startswith("failover: "):
                lines.append(line)
            elif lines:
                lines[-1] = f"{lines[-1].rstrip()} {line.strip()}"
        return lines

    wait_for(lambda: failover_lines(*both) == [], 120, "status with nothing a failover would miss")
    with psycopg.connect(standby.dsn(DB), autocommit=True) as conn:
        conn.execute("alter system set sync_replication_slots = off")
        conn.execute("alter system set hot_standby_feedback = off")
        conn.execute("select pg_reload_conf()")
        wait_for(lambda: conn.execute("select count(*) from pg_stat_activity where "
                                      "backend_type = 'slotsync worker'").fetchone() == (0,),
                 30, "the standby's slot sync worker to stop")
    with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:
        conn.execute("select pg_create_physical_replication_slot('gone')")
        conn.execute("alter system set synchronized_standby_slots = 'gone'")
        conn.execute("select pg_reload_conf()")
        conn.execute("select pg_create_logical_replication_slot('late', 'pgoutput', false, "
                     "false, true)")  # made with slot sync off: never copied
        conn.execute("select pg_create_logical_replication_slot('plain', 'pgoutput')")
    at = f"standby 127.0.0.1:{standby.port}"
    expected = [
        "slot plain is not a failover slot",
        "no standby streams from slot gone (in synchronized_standby_slots)",
        "the standby on physical slot standby1 is not in synchronized_standby_slots: a promoted "
        "standby may lack changes the capture published; add it (ALTER SYSTEM SET "
        "synchronized_standby_slots = 'gone, standby1'; SELECT pg_reload_conf())",
        f"{at}: sync_replication_slots is off",
        f"{at}: hot_standby_feedback is off",
        f"{at} has no copy of failover slot late yet",
    ]

    lines: list[str] = []

    def all_shown() -> bool:
        lines[:] = failover_lines(*both)
        return all(any(f"failover: {e}" in line for line in lines) for e in expected)

    try:
        wait_for(all_shown, 60, "a line for each setting a failover would miss")
    except AssertionError as exc:
        raise AssertionError("\n".join([str(exc), "shown:", *lines])) from None
    # one line per problem: the standby's own feedback off, not also the primary's view of it
    assert len(lines) == len(expected), "\n".join(lines)
    assert standby.password not in "\n".join(lines)
    # the primary alone sees the standby's feedback off through its physical slot
    alone = failover_lines("-d", primary.dsn(DB))
    assert any(line.startswith("failover: the standby on physical slot standby1 sends no "
                               "hot_standby_feedback") for line in alone), "\n".join(alone)


def test_a_promotion_without_the_slot_stops_the_capture_in_one_line(
        stack, primary_and_standby, prefix, tmp_path):
    """A capture whose slot has no copy on the standby (not a failover slot: --failover off),
    restarted after the promotion: one line naming the server reached and the recovery, and
    nothing made on the new primary (no slot), rather than a silent new snapshot."""
    primary, standby = primary_and_standby
    with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:
        conn.execute("create table items (id int primary key)")
        conn.execute("insert into items values (1)")
    both = (f"host=127.0.0.1,127.0.0.1 port={primary.port},{standby.port} dbname={DB} "
            f"user=postgres password={stack.stack.password} target_session_attrs=read-write")
    args = ["-d", both, "-s", prefix, "-b", stack.kafka, "-r", stack.registry_url, "-p", prefix]
    capture = capture_process([*args, "--failover", "off"], tmp_path / "capture.log")
    try:
        wait_streaming(primary.dsn(DB), prefix)
    finally:
        capture.terminate()
        capture.wait(30)
    os.kill(primary.running_pid(), signal.SIGKILL)
    with psycopg.connect(standby.dsn(DB), autocommit=True) as conn:
        assert conn.execute("select pg_promote()").fetchone() == (True,)
    refused = bottler("capture", *args)
    assert_clear_error(refused, f"replication slot {prefix} is missing on the server the "
                       f"capture reached (127.0.0.1:{standby.port})", "--recover-lost-slot",
                       secrets=(stack.stack.password,))
    with psycopg.connect(standby.dsn(DB)) as conn:
        assert conn.execute("select slot_name from pg_replication_slots "
                            "where slot_type = 'logical'").fetchall() == []
