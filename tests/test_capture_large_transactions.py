"""Large transactions streamed while they run (--stream-large-transactions: pgoutput protocol 2+
with streaming), staged on the capture's disk until they commit, then published in one Kafka
transaction: committed ones arrive whole, aborted ones and aborted subtransactions never do, the
source spills nothing (side by side with protocol 1 on the same workload), a `kill -9` in the
middle of one loses nothing, and a read_committed reader never sees part of one, even when the
capture is killed in the middle of its publication."""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, TopicPartition
from psycopg.conninfo import conninfo_to_dict

from tests.support.capture import capture_process
from tests.support.databases import execute, rows
from tests.support.topics import Decoder, read_committed
from tests.support.waiting import wait_for, wait_streaming

pytestmark = pytest.mark.pg_matrix  # on PostgreSQL 15 and 18 (tests/conftest.py)

ROWS = 3000  # ~100 bytes each: several times the 64 kB logical_decoding_work_mem set below
PAYLOAD = "repeat(md5(i::text), 3)"


@pytest.fixture
def small_decoding_memory(source):
    """The source's logical_decoding_work_mem at its minimum (64 kB): the walsenders of its
    database stream, or spill, every transaction larger than that."""
    name = conninfo_to_dict(source)["dbname"]
    execute(source, f"alter database {name} set logical_decoding_work_mem = '64kB'",
            "create table big (id int primary key, note text not null, payload text)")
    return source


def slot_stats(dsn: str, slot: str) -> dict[str, int]:
    return dict(zip(("spill_bytes", "stream_bytes", "stream_txns"), rows(
        dsn, "select spill_bytes, stream_bytes, stream_txns from pg_stat_replication_slots "
        f"where slot_name = '{slot}'")[0], strict=True))


def decoded(dsn: str, slot: str) -> dict[str, int] | None:
    """The slot's statistics once they count the workload's large transactions."""
    stats = slot_stats(dsn, slot)
    return stats if stats["spill_bytes"] + stats["stream_bytes"] > 0 else None


def published(stack, topic: str) -> tuple[dict[int, str], list[str]]:
    """The topic's last state per id (note), and every note ever published to it, as a
    read_committed reader sees them."""
    decoder = Decoder(stack.registry_url)
    messages = read_committed(stack.kafka, topic)
    notes = [decoder.value(m)["note"] for m in messages if m.value() is not None]
    state = {dict(k)["id"]: v["note"] for k, v in decoder.table_state(messages).items()}
    return state, notes


def workload(dsn: str) -> None:
    """A committed large transaction, an aborted one, and one whose middle subtransaction is
    rolled back; then a small one, to know when the rest has been decoded."""
    execute(dsn, f"insert into big select i, 'kept', {PAYLOAD} from generate_series(1, {ROWS}) i")
    execute(dsn, "begin", f"insert into big select i, 'doomed', {PAYLOAD} "
            f"from generate_series({ROWS + 1}, {2 * ROWS}) i", "rollback")
    execute(dsn, "begin",
            f"insert into big select i, 'kept', {PAYLOAD} "
            f"from generate_series({2 * ROWS + 1}, {3 * ROWS}) i",
            "savepoint part",
            f"insert into big select i, 'doomed', {PAYLOAD} "
            f"from generate_series({3 * ROWS + 1}, {4 * ROWS}) i",
            "update big set note = 'doomed' where id <= 10",
            "rollback to savepoint part",
            f"update big set note = 'updated' where id between {2 * ROWS + 1} and {2 * ROWS + 10}",
            "commit")
    execute(dsn, "insert into big values (0, 'last', null)")


def expected_state(dsn: str) -> dict[int, str]:
    return dict(rows(dsn, "select id, note from big"))


def wait_published(stack, topic: str, expected: dict[int, str], proc=None, log=None):
    """The topic once it holds ``expected``: (its state, every note ever published)."""
    def arrived():
        if proc is not None:
            assert proc.poll() is None, log.read_text()[-3000:]
        got = published(stack, topic)
        return got if got[0] == expected else None

    return wait_for(arrived, 120, f"every committed row in {topic}")


def test_streamed_transactions_arrive_whole_and_spill_nothing(stack, small_decoding_memory,
                                                              prefix, start, tmp_path):
    source = small_decoding_memory
    streamed, whole = f"{prefix}s", f"{prefix}w"  # the new path and protocol 1, side by side
    start(slot=streamed, topic_prefix=streamed, stream_large_transactions="on",
          stream_spool_dir=tmp_path / "spool")
    start(slot=whole, topic_prefix=whole, stream_large_transactions="off")
    wait_streaming(source, streamed)
    wait_streaming(source, whole)

    workload(source)
    expected = expected_state(source)
    assert len(expected) == 2 * ROWS + 1
    for name in (streamed, whole):
        _, notes = wait_published(stack, f"{name}.big", expected)
        assert "doomed" not in notes  # no row of an aborted transaction or subtransaction
        assert len(notes) == 2 * ROWS + 10 + 1  # each insert once, each committed update once

    stats = {name: wait_for(lambda n=name: decoded(source, n), 60, f"{name}'s statistics")
             for name in (streamed, whole)}
    assert stats[streamed]["spill_bytes"] == 0  # the source spilled nothing: it streamed
    assert stats[streamed]["stream_txns"] >= 2  # 18 skips one that aborted before decoding
    assert stats[whole]["spill_bytes"] > 4 * ROWS * 100  # protocol 1 spills on the same work
    assert not any((tmp_path / "spool").iterdir())  # nothing staged is left


def test_kill_9_in_the_middle_of_a_streamed_transaction_loses_nothing(
        stack, small_decoding_memory, prefix, tmp_path):
    source = small_decoding_memory
    spool = tmp_path / "spool"
    args = capture_args(stack, source, prefix, spool)
    log = tmp_path / "capture.log"
    proc = capture_process(args, log)
    try:
        wait_streaming(source, prefix)
        with psycopg.connect(source) as conn:  # one transaction, open across the crash
            conn.execute(f"insert into big select i, 'kept', {PAYLOAD} "
                         f"from generate_series(1, {ROWS}) i")
            conn.execute("savepoint part")
            conn.execute(f"insert into big select i, 'doomed', {PAYLOAD} "
                         f"from generate_series({ROWS + 1}, {2 * ROWS}) i")
            # WAL is sent once flushed: another transaction's commit flushes this one's so far
            execute(source, "select pg_logical_emit_message(true, 'flush', '')")
            wait_for(lambda: staged_bytes(spool) > 64 * 1024, 60,
                     "the open transaction staged by the capture")
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
            conn.execute("rollback to savepoint part")
            conn.execute(f"insert into big select i, 'kept', {PAYLOAD} "
                         f"from generate_series({2 * ROWS + 1}, {3 * ROWS}) i")
        execute(source, "insert into big values (0, 'last', null)")
        proc = capture_process(args, log)
        expected = expected_state(source)
        assert len(expected) == 2 * ROWS + 1
        _, notes = wait_published(stack, f"{prefix}.big", expected, proc, log)
        assert "doomed" not in notes
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def test_read_committed_readers_never_see_part_of_a_streamed_transaction(
        stack, small_decoding_memory, prefix, tmp_path):
    """The capture stopped, then killed, in the middle of a streamed transaction's publication:
    a read_committed reader sees none of it (though Kafka holds some), and after the restart
    all of it, each row once."""
    source, rows_ = small_decoding_memory, 20 * ROWS  # its publication takes a while
    args = capture_args(stack, source, prefix, tmp_path / "spool")
    log, topic = tmp_path / "capture.log", f"{prefix}.big"
    proc = capture_process(args, log)
    try:
        wait_streaming(source, prefix)
        execute(source, f"insert into big select i, 'kept', {PAYLOAD} "
                f"from generate_series(1, {rows_}) i")
        written = UncommittedEnd(stack.kafka, topic)
        deadline = time.monotonic() + 120
        while not written() and time.monotonic() < deadline:  # closely: a race with the commit
            assert proc.poll() is None, log.read_text()[-3000:]
        os.kill(proc.pid, signal.SIGSTOP)  # in the middle: some rows written, no commit
        assert 0 < written() < rows_, log.read_text()[-3000:]
        written.close()
        assert read_committed(stack.kafka, topic) == []
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        assert read_committed(stack.kafka, topic) == []  # the open transaction stays unseen
        proc = capture_process(args, log)  # fences the open one: aborted, streamed again
        expected = expected_state(source)
        _, notes = wait_published(stack, topic, expected, proc, log)
        assert len(notes) == rows_  # each row once: the killed run's rows were aborted
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)


def test_a_row_too_large_in_a_streamed_transaction_is_dead_lettered_the_rest_published(
        stack, small_decoding_memory, prefix, start):
    """Inside a Kafka transaction a row the broker would refuse for its size is refused by the
    producer first: --on-error decides for it (a dead letter), the rest commits."""
    source = small_decoding_memory
    # the broker refuses over 20 kB (-T), the ordinary producer over 200 kB (-C)
    capture = start(stream_large_transactions="on", topic_config={"max.message.bytes": "20000"},
                    kafka_config={"message.max.bytes": "200000"})
    wait_streaming(source, prefix)
    with psycopg.connect(source) as conn:
        conn.execute(f"insert into big select i, 'kept', {PAYLOAD} "
                     f"from generate_series(1, {ROWS}) i")
        # 64 kB of hex digits, which lz4 hardly compresses
        conn.execute("insert into big select 0, 'large', string_agg(md5(g::text), '') "
                     "from generate_series(1, 2000) g")
    expected = {i: n for i, n in expected_state(source).items() if i != 0}
    _, notes = wait_published(stack, f"{prefix}.big", expected)
    assert len(notes) == ROWS
    dead_letters = f"{prefix}._bottler.capture-dead-letter"
    letters = wait_for(lambda: read_committed(stack.kafka, dead_letters), 60, "the dead letter")
    assert [json.loads(m.key())["key"] for m in letters] == [{"id": "0"}]
    assert capture.thread.is_alive() and capture.error is None


def capture_args(stack, source: str, prefix: str, spool: Path) -> list[str]:
    return ["-d", source, "-s", prefix, "-b", stack.kafka, "-r", stack.registry_url,
            "-p", prefix, "--heartbeat-interval", "1", "--stream-large-transactions", "on",
            "--stream-spool-dir", str(spool)]


class UncommittedEnd:
    """The end of a topic's log, the messages of open Kafka transactions included (0 while the
    topic does not exist): what a read_uncommitted reader would read up to."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "t-uncommitted",
                                  "isolation.level": "read_uncommitted"})

    def __call__(self) -> int:
        if self.topic not in self.consumer.list_topics(timeout=10).topics:
            return 0
        return self.consumer.get_watermark_offsets(TopicPartition(self.topic, 0), timeout=10,
                                                   cached=False)[1]

    def close(self) -> None:
        self.consumer.close()


def staged_bytes(spool: Path) -> int:
    return sum(f.stat().st_size for f in spool.glob("*.stream")) if spool.exists() else 0


def test_replay_workers_publish_what_the_main_thread_alone_publishes(
        stack, small_decoding_memory, prefix, start, tmp_path, caplog):
    """A streamed transaction of several runs (capture/stream/replay.py), with a schema change,
    a key that changes, deletes and a rolled-back subtransaction in its middle: the capture
    whose workers encode its rows publishes message for message what one without them does
    (keys, values, the WAL position of each)."""
    caplog.set_level(logging.INFO, logger="capture.stream.replay")
    source = small_decoding_memory
    rows_ = 25_000  # ~4 MB staged: several 2 MB runs on either side of the schema change
    workers, alone = f"{prefix}p", f"{prefix}a"
    start(slot=workers, topic_prefix=workers, stream_spool_dir=tmp_path / "p",
          stream_large_transactions="on", stream_replay_workers=2)
    start(slot=alone, topic_prefix=alone, stream_spool_dir=tmp_path / "a",
          stream_large_transactions="on", stream_replay_workers=0)
    wait_streaming(source, workers)
    wait_streaming(source, alone)
    execute(source, "begin",
            f"insert into big select i, 'first', {PAYLOAD} from generate_series(1, {rows_}) i",
            "alter table big add column extra int not null default 7",
            f"insert into big select i, 'second', {PAYLOAD}, i "
            f"from generate_series({rows_ + 1}, {2 * rows_}) i",
            "savepoint part",
            f"update big set note = 'doomed' where id > {rows_}",
            "rollback to savepoint part",
            "update big set id = -id where id <= 5",  # new keys: a delete of each old one
            f"delete from big where id between {rows_ - 100} and {rows_}",
            f"update big set note = 'again' where id between {rows_ + 1} and {rows_ + 10_000}",
            "commit")
    execute(source, "insert into big values (0, 'last', null)")
    expected = expected_state(source)
    got = {}
    for name in (workers, alone):
        wait_published(stack, f"{name}.big", expected)
        decoder = Decoder(stack.registry_url)
        got[name] = [(decoder.key(m), decoder.value(m) if m.value() is not None else None,
                      dict(m.headers())["bottler.lsn"])
                     for m in read_committed(stack.kafka, f"{name}.big")]
    assert len(got[workers]) == 2 * rows_ + 5 + 5 + 101 + 10_000 + 1
    assert got[workers] == got[alone]
    assert "replayed by 2 workers" in caplog.text  # the workers did replay it
