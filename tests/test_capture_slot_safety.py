"""Slot safety (issue 14, item 5): the capture exports its slot's retained WAL and safe_wal_size
and warns past its thresholds; a slot PostgreSQL invalidated (`wal_status = lost`) gives one
clear error naming the recovery, and the recovery (--recover-lost-slot) ends with the replica
equal to the source, deletes made while the slot was lost included. Against the session's
PostgreSQL, whose max_slot_wal_keep_size is lowered for the test and restored after it."""

from __future__ import annotations

import logging
from contextlib import contextmanager

import psycopg2
import psycopg2.extras
import pytest
from confluent_kafka.admin import AdminClient
from prometheus_client import REGISTRY

from capture.health.slot_safety import MIB, SlotWatch, lost_while_streaming
from capture.setup.state import CaptureState
from tests.support.cli import assert_clear_error, bottler, services
from tests.support.databases import execute, rows
from tests.support.replica import converge, replica
from tests.support.waiting import wait_for, wait_streaming

QUERIES = ("select * from items order by id", "select * from tags order by id")


@contextmanager
def small_max_slot_wal_keep_size(admin_dsn: str):
    """Slots may keep at most 1 MB of WAL, on the whole (session's) server, for the block."""
    execute(admin_dsn, "alter system set max_slot_wal_keep_size = '1MB'",
            "select pg_reload_conf()")
    try:
        yield
    finally:
        execute(admin_dsn, "alter system reset max_slot_wal_keep_size", "select pg_reload_conf()")


def wal_status(dsn: str, slot: str) -> str | None:
    found = rows(dsn, f"select wal_status from pg_replication_slots where slot_name = '{slot}'")
    return found[0][0] if found else None


def churn_until_lost(dsn: str, slot: str) -> None:
    """WAL written past the limit, then checkpoints: PostgreSQL invalidates the slot."""
    def lost():
        execute(dsn, "select pg_logical_emit_message(false, 'churn', repeat('x', 2000000))",
                "select pg_switch_wal()", "checkpoint")
        return wal_status(dsn, slot) == "lost"

    wait_for(lost, 60, f"slot {slot} to be invalidated")


def test_a_lost_slot_is_one_clear_error_and_the_recovery_ends_with_the_replica_equal(
    stack, source, target, prefix, start, caplog
):
    execute(source,
            "create table items (id int primary key, name text)",
            "create table tags (id int primary key, label text)",
            "insert into items select g, 'item ' || g from generate_series(1, 50) g",
            "insert into tags select g, 'tag ' || g from generate_series(1, 10) g")
    with replica(stack, target, prefix) as (_, _, failure):
        capture = start()
        wait_streaming(source, prefix)
        converge(source, target, QUERIES, failure)
        capture.stop()

        # While the capture is stopped: changes of every kind, deletes included.
        execute(source, "delete from items where id <= 10", "update items set name = 'renamed' "
                "where id between 11 and 20", "insert into items values (51, 'new')",
                "delete from tags where id = 1", "insert into tags values (11, 'new')")

        with small_max_slot_wal_keep_size(stack.pg_dsn):
            # the watch exports the slot's figures and warns past its thresholds
            watch = SlotWatch(source, prefix, warn_retained=1, warn_safe=2048 * MIB)
            reading = watch.probe.read()
            assert reading is not None and reading.safe is not None  # under the 1 MB limit
            with caplog.at_level(logging.WARNING, logger="capture.health.slot_safety"):
                watch.check(reading)
            exported = REGISTRY.get_sample_value
            assert exported("bottler_capture_slot_safe_wal_bytes") == reading.safe
            assert exported("bottler_capture_slot_retained_wal_bytes") == reading.retained
            assert exported("bottler_capture_slot_wal_status", {"status": reading.wal_status}) == 1
            warned = caplog.text
            assert f"slot {prefix} makes the source keep" in warned
            assert f"slot {prefix} is close to being invalidated" in warned

            churn_until_lost(stack.pg_dsn, prefix)
            watch.probe.close()

        # START_REPLICATION on the lost slot (PostgreSQL 15's words) is recognised
        conn = psycopg2.connect(source,
                                connection_factory=psycopg2.extras.LogicalReplicationConnection)
        try:
            with pytest.raises(psycopg2.Error) as refused:
                conn.cursor().start_replication(slot_name=prefix, decode=False, options={
                    "proto_version": "1", "publication_names": prefix})
        finally:
            conn.close()
        assert "invalidated" in str(refused.value), refused.value
        assert lost_while_streaming(source, prefix, refused.value)

        # A capture started as before: one clear line, and the command that recovers.
        args = ("capture", "-d", source, "-s", prefix, "-p", prefix, *services(stack))
        text = assert_clear_error(bottler(*args), f"replication slot {prefix} was invalidated",
                                  "wal_status = lost", "--recover-lost-slot",
                                  "docs/operations.md#slot-safety")

        # The documented recovery.
        start(recover_lost_slot=True)
        wait_streaming(source, prefix)
        assert wal_status(source, prefix) in ("reserved", "extended"), text
        converge(source, target, QUERIES, failure)
        assert rows(target, "select count(*) from items where id <= 10") == [(0,)]

        # and the stream goes on
        execute(source, "delete from items where id = 51", "update tags set label = 'after'")
        converge(source, target, QUERIES, failure)


def test_a_slot_gone_where_the_capture_streamed_is_one_clear_line_and_the_recovery_ends_equal(
    stack, source, target, prefix, start
):
    """The slot the capture streamed from is missing (dropped by hand here; to the capture the
    same as a promoted standby without its synchronized copy): the start stops in one line,
    creating nothing, rather than snapshot again and keep the rows deleted meanwhile in the
    views; --recover-lost-slot recovers it as a lost slot."""
    execute(source, "create table items (id int primary key, name text)",
            "create table tags (id int primary key, label text)",
            "insert into items select g, 'item ' || g from generate_series(1, 20) g",
            "insert into tags values (1, 'tag')")
    with replica(stack, target, prefix) as (_, _, failure):
        capture = start()
        wait_streaming(source, prefix)
        converge(source, target, QUERIES, failure)
        capture.stop()
        execute(source, "delete from items where id <= 5", "insert into items values (21, 'new')",
                f"select pg_drop_replication_slot('{prefix}')")
        records = CaptureState(stack.kafka, prefix).read_all()
        topics = sorted(t for t in AdminClient({"bootstrap.servers": stack.kafka})
                        .list_topics(timeout=10).topics if t.startswith(prefix))
        publications = rows(source, "select pubname from pg_publication order by 1")

        args = ("capture", "-d", source, "-s", prefix, "-p", prefix, *services(stack))
        assert_clear_error(bottler(*args), f"replication slot {prefix} is missing",
                           "streamed from it before", "--recover-lost-slot",
                           "docs/operations.md#high-availability")
        assert rows(source, "select count(*) from pg_replication_slots "
                    f"where slot_name = '{prefix}'") == [(0,)]
        assert rows(source, "select pubname from pg_publication order by 1") == publications
        assert CaptureState(stack.kafka, prefix).read_all() == records
        assert sorted(t for t in AdminClient({"bootstrap.servers": stack.kafka})
                      .list_topics(timeout=10).topics if t.startswith(prefix)) == topics

        start(recover_lost_slot=True)
        wait_streaming(source, prefix)
        converge(source, target, QUERIES, failure)
        assert rows(target, "select count(*) from items where id <= 5") == [(0,)]
