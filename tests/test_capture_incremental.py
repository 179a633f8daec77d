"""Incremental snapshots (DBLog's watermarks) while the capture streams: a table re-published in
key-ordered chunks under a write load on the same rows, the capture killed (-9) mid-way and
restarted; the replica ends equal to the source."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import uuid

import psycopg

from capture.setup.state import CaptureState
from capture.snapshot.incremental import Request, Window, _widen
from materializers.core import Materializer
from materializers.postgres import PostgresSink
from tests.support.cli import bottler
from tests.support.databases import WriteLoad, execute, rows
from tests.support.topics import Decoder, read_topic, topic_state
from tests.support.waiting import wait_for, wait_streaming

ROWS = 200_000
CHUNK_ROWS = 2_000  # 100 chunks


# -- the window's rules, without a database -----------------------------------------------------
def window(rows: dict, xmin=100, xmax=110, xip=(105,)) -> Window:
    return Window("w", Request(1, "public.t"), None, dict(rows), {}, None, False, xmin, xmax,
                  frozenset(xip))


def test_a_snapshot_sees_the_transactions_below_xmax_that_were_not_running():
    w = window({})
    assert w.visible(99) and w.visible(104) and w.visible(109)
    assert not w.visible(105)  # running when the snapshot was taken
    assert not w.visible(110) and not w.visible(200)  # started after it


def test_stream_xids_are_widened_to_the_snapshots_epoch():
    epoch = 3 << 32
    assert _widen(7, epoch + 10) == epoch + 7
    assert _widen(0xFFFFFFF0, epoch + 10) == epoch - 16  # just before the wraparound
    assert _widen(20, epoch - 16) == epoch + 20  # just after it
    w = window({}, xmin=epoch - 5, xmax=epoch + 5, xip=())
    assert w.visible(0xFFFFFFFE) and not w.visible(5)


def test_before_the_low_watermark_only_changes_the_snapshot_missed_drop_chunk_rows():
    from capture.snapshot.incremental import IncrementalSnapshots

    snapshots = IncrementalSnapshots("", "s", None, [], None, 10, None)
    snapshots.window = w = window({b"a": b"1", b"b": b"2", b"c": b"3"})
    snapshots.touched(1, b"a", 104)  # seen by the snapshot: the chunk's row is as new
    snapshots.touched(1, b"b", 105)  # not seen: the stream's change is newer
    snapshots.touched(2, b"c", 111)  # another table
    assert list(w.rows) == [b"a", b"c"]
    w.opened = True  # between the watermarks every change wins (DBLog)
    snapshots.touched(1, b"a", 104)
    assert list(w.rows) == [b"c"]


# -- end to end ---------------------------------------------------------------------------------
class Writer(WriteLoad):
    """Updates, deletes and re-inserts rows of the table being snapshotted, all over the key
    range, until stopped."""

    seed, pause = 14, 0.005

    def transaction(self, conn, rnd) -> None:
        first = rnd.randint(1, ROWS)
        conn.execute("update orders set v = v + 1, note = 'updated' "
                     "where id between %s and %s", (first, first + 30))
        conn.execute("delete from orders where id = %s", (rnd.randint(1, ROWS),))
        conn.execute("insert into orders values (%s, 0, 'again') "
                     "on conflict (id) do update set v = orders.v + 1", (rnd.randint(1, ROWS),))


def start_capture(stack, source, prefix, log):
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "capture", "-d", source, "-s", prefix,
         "-b", stack.kafka, "-r", stack.registry_url, "-p", prefix, "--skip-snapshot",
         "--heartbeat-interval", "1", "--incremental-chunk-rows", str(CHUNK_ROWS)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )


def test_incremental_snapshot_under_writes_survives_kill_9(stack, source, target, prefix,
                                                          tmp_path):
    execute(source,
            "create table orders (id bigint primary key, v int not null, note text)",
            f"insert into orders select g, 0, 'initial' from generate_series(1, {ROWS}) g")
    key = f"{prefix}/incremental/public.orders"
    state = CaptureState(stack.kafka, prefix)
    log_path = tmp_path / "capture.log"
    log = open(log_path, "ab")  # noqa: SIM115
    writer = Writer(source)

    def alive(proc):
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert writer.error is None, writer.error

    proc = start_capture(stack, source, prefix, log)
    try:
        wait_streaming(source, prefix)
        # no snapshot was taken (--skip-snapshot): only the incremental one publishes old rows
        writer.start()
        wrong_slot = bottler("capture", "snapshot", "orders", "-d", source, "-s", "nosuchslot")
        assert wrong_slot.returncode != 0 and "no replication slot nosuchslot" in wrong_slot.stderr
        asked = bottler("capture", "snapshot", "public.orders", "-d", source, "-s", prefix)
        assert asked.returncode == 0, asked.stderr

        def midway():
            alive(proc)
            record = state.read(key)
            return record if record and record["rows"] >= ROWS // 4 else None

        wait_for(midway, 120, "a quarter of the table published")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc = start_capture(stack, source, prefix, log)

        def complete():
            alive(proc)
            return "incremental snapshot of public.orders complete" in log_path.read_text()

        wait_for(complete, 180, "the incremental snapshot to complete")
        # its progress is removed once the last chunk is confirmed
        wait_for(lambda: state.read(key) is None, 30, "the snapshot's progress to be removed")
        writer.stopped.set()
        writer.join(30)
        assert writer.commits > 50, writer.commits
        resumed = log_path.read_text().split("resuming the incremental snapshot of public.orders")
        assert len(resumed) == 2, "the restarted capture did not resume the snapshot"

        # the replica, run until caught up, until it equals the source (the capture may still
        # be publishing the writer's last changes)
        expected = rows(source, "select id, v, note from orders order by id")
        sink = PostgresSink(target, f"g-{uuid.uuid4().hex[:8]}")
        try:
            got: list[tuple] = []

            def equal():
                alive(proc)
                Materializer(sink, bootstrap=stack.kafka, registry=stack.registry_url,
                             group_id=sink.group_id, prefix=prefix, batch_timeout=0.2,
                             progress=False).run_until_caught_up(120)
                try:
                    got[:] = rows(target, "select id, v, note from orders order by id")
                except psycopg.errors.UndefinedTable:
                    return False
                return got == expected

            try:
                wait_for(equal, 90, "the replica to equal the source")
            except AssertionError:
                source_rows, replica_rows = set(expected), set(got)
                raise AssertionError(
                    f"replica differs: {len(got)} rows, {len(expected)} in the source; only in "
                    f"the source {sorted(source_rows - replica_rows)[:10]}, only in the replica "
                    f"{sorted(replica_rows - source_rows)[:10]}") from None
        finally:
            sink.close()
    finally:
        writer.stopped.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        log.close()


def test_requests_for_other_slots_and_unknown_messages_are_ignored(stack, source, prefix, start):
    execute(source, "create table quiet (id int primary key)", "insert into quiet values (1)")
    start(skip_snapshot=True, incremental_chunk_rows=10)
    wait_streaming(source, prefix)
    other = json.dumps({"type": "snapshot", "slot": "another", "table": "quiet"})
    execute(
        source,
        f"select pg_logical_emit_message(true, 'bottler.signal', '{other}')",
        "select pg_logical_emit_message(true, 'bottler.signal', 'not json')",
        "select pg_logical_emit_message(true, 'someone.else', 'hello')",
        "select pg_logical_emit_message(false, 'someone.else', 'hello')",
        "select pg_logical_emit_message(true, 'bottler.watermark', '{\"id\": \"x\"}')",
        "insert into quiet values (2)",
    )
    asked = bottler("capture", "snapshot", "quiet", "-d", source, "-s", prefix)
    assert asked.returncode == 0, asked.stderr
    assert len(topic_state(stack, f"{prefix}.quiet", 2)) == 2
    wait_for(lambda: CaptureState(stack.kafka, prefix).read(
        f"{prefix}/incremental/public.quiet") is None, 30, "the request to be done")
    # the streamed insert, then the snapshot's two rows: the other slot's request did nothing
    assert len(read_topic(stack.kafka, f"{prefix}.quiet")) == 3


def test_an_unkeyed_table_is_republished_by_page_ranges(stack, source, prefix, start):
    execute(source, "create table loose (v int)",
            "insert into loose select g from generate_series(1, 500) g")
    start(skip_snapshot=True, allow_unkeyed=True, incremental_chunk_rows=100)  # 2 pages a chunk
    wait_streaming(source, prefix)
    asked = bottler("capture", "snapshot", "loose", "-d", source, "-s", prefix)
    assert asked.returncode == 0, asked.stderr
    decoder = Decoder(stack.registry_url)

    def published():
        try:
            values = [decoder.value(m)["v"] for m in read_topic(stack.kafka, f"{prefix}.loose")]
        except KeyError:  # no topic yet
            return None
        return values if len(values) >= 500 else None

    assert sorted(wait_for(published, 60, "the unkeyed table's rows")) == list(range(1, 501))


def test_a_rename_during_a_snapshot_of_the_table_starts_it_over(stack, source, prefix, start,
                                                                 caplog):
    """The rows a snapshot under way published before a rename hold the old name: the capture's
    own re-publication (capture/stream/schema_changes.py) restarts it, and every row's latest
    message ends under the new name."""
    from capture.snapshot.request import request_snapshot

    total = 30_000
    execute(source, "create table big (id int primary key, a int)",
            f"insert into big select g, g from generate_series(1, {total}) g")
    start(skip_snapshot=True, incremental_chunk_rows=100)
    wait_streaming(source, prefix)
    request_snapshot(source, prefix, "big")
    topic = f"{prefix}.big"

    def some_published():
        try:
            return len(read_topic(stack.kafka, topic)) >= 2_000
        except KeyError:
            return False

    wait_for(some_published, 60, "the snapshot's first chunks")
    caplog.set_level(logging.INFO, logger="capture")
    execute(source, "alter table big rename column a to a2", "update big set a2 = -1 where id = 1")
    decoder = Decoder(stack.registry_url)

    def renamed():
        state = decoder.table_state(read_topic(stack.kafka, topic))
        values = sorted((v["id"], v.get("a2")) for v in state.values())
        return len(values) == total and values[0] == (1, -1) and all(
            a2 == i for i, a2 in values[1:]) and not any("a" in v for v in state.values())

    wait_for(renamed, 120, "every row's latest message under the new name")
    assert "incremental snapshot of public.big starts over: column a renamed to a2" in caplog.text
