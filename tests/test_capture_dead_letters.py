"""One table's bad row never stops the others, and is never lost (issue 14, item 2): a row the
broker refuses for its size goes whole to the capture's dead-letter topic, the stream goes on,
and `bottler status` shows it. Against the session's real broker, which enforces the topics'
max.message.bytes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from confluent_kafka.admin import AdminClient
from prometheus_client import REGISTRY

from capture.publish.dead_letters import ErrorPolicy, OnError
from capture.publish.producer_config import producer_config
from capture.publish.publisher import Publisher
from capture.publish.row import Row
from capture.setup.topics import ensure_topics
from common.errors import BottlerError
from common.lsn import Lsn
from compose.procs import free_port
from tests.support.databases import execute, rows
from tests.support.topics import read_topic, topic_state
from tests.support.waiting import wait_for, wait_streaming

ROOT = Path(__file__).resolve().parents[1]


def dead_letters_counted() -> float:
    return sum(s.value for m in REGISTRY.collect() if m.name == "bottler_capture_dead_letters"
               for s in m.samples if s.name == "bottler_capture_dead_letters_total")


def status_row(metrics_url: str, part: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "bottler", "status", "--once", "--metrics",
                          f"capture={metrics_url}"], capture_output=True, text=True, timeout=60,
                         cwd=ROOT).stdout
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("│")]
        if len(cells) > 5 and cells[1] == part:
            return cells
    raise AssertionError(f"no {part} row in:\n{out}")


def test_rows_over_the_size_limits_go_to_the_dead_letter_topic_and_the_stream_goes_on(
    stack, source, prefix, start
):
    execute(source, "create table docs (id int primary key, body text)",
            "create table notes (id int primary key, line text)",
            "insert into docs values (1, 'small')", "insert into notes values (1, 'first')")
    counted = dead_letters_counted()
    port = free_port()
    # the broker refuses messages over 20 kB on the capture's topics (after compression), the
    # producer itself those over 200 kB
    capture = start(topic_config={"max.message.bytes": "20000"},
                    kafka_config={"message.max.bytes": "200000"}, metrics_port=port)
    wait_streaming(source, prefix)
    before = Lsn.parse(rows(source, "select pg_current_wal_lsn()::text")[0][0])
    with psycopg.connect(source) as conn:  # one transaction: its other rows are published
        # 64 kB of hex digits, which lz4 hardly compresses: refused by the broker
        conn.execute("insert into docs select 2, string_agg(md5(g::text), '') "
                     "from generate_series(1, 2000) g")
        conn.execute("insert into notes values (2, 'same transaction')")
        # 384 kB: refused by the producer before it is sent
        conn.execute("insert into docs select 4, string_agg(md5(g::text), '') "
                     "from generate_series(1, 12000) g")
    after = Lsn.parse(rows(source, "select pg_current_wal_lsn()::text")[0][0])
    execute(source, "insert into docs values (3, 'later')", "update docs set body = 'changed' "
            "where id = 1", "insert into notes values (3, 'later')")

    # later changes of every table arrive
    docs = topic_state(stack, f"{prefix}.docs", 2)
    assert {dict(k)["id"]: v["body"] for k, v in docs.items()} == {1: "changed", 3: "later"}
    notes = topic_state(stack, f"{prefix}.notes", 3)
    assert sorted(dict(k)["id"] for k in notes) == [1, 2, 3]

    topic = f"{prefix}._bottler.capture-dead-letter"
    letters = wait_for(lambda: len(m := read_topic(stack.kafka, topic)) == 2 and m, 30,
                       "two dead letters")
    bodies = dict(rows(source, "select id, body from docs where id in (2, 4)"))
    # in the order they were refused (the producer refuses at once, the broker later)
    letters.sort(key=lambda m: json.loads(m.value())["lsn"])
    for msg, key in zip(letters, (2, 4), strict=True):
        letter = json.loads(msg.value())
        assert json.loads(msg.key()) == {"table": "public.docs", "key": {"id": str(key)}}
        assert letter["table"] == "public.docs" and letter["topic"] == f"{prefix}.docs"
        assert letter["op"] == "insert" and letter["key"] == {"id": str(key)}
        assert letter["columns"] == {"id": str(key), "body": bodies[key]}  # the whole row
        assert before < letter["lsn"] < after
        assert dict(msg.headers())["bottler.lsn"] == b"%d" % letter["lsn"]
        assert "exceeds" in letter["reason"] and "max.message.bytes" in letter["reason"]
        assert letter["slot"] == prefix

    # the slot moves past the dead-lettered rows: they count as acknowledged
    def confirmed() -> int:
        lsn = rows(source, "select confirmed_flush_lsn::text from pg_replication_slots "
                   f"where slot_name = '{prefix}'")[0][0]
        return Lsn.parse(lsn) >= after

    wait_for(confirmed, 30, "the slot to be confirmed past the dead-lettered rows")
    assert capture.thread.is_alive() and capture.error is None

    # counted, and shown in `bottler status` (this process's metrics: earlier tests' included)
    assert dead_letters_counted() == counted + 2
    row = status_row(f"http://127.0.0.1:{port}/metrics", "capture")
    assert row[2] == "streaming" and row[5] == f"{int(counted) + 2:,}", row


def test_an_incremental_snapshots_oversized_row_is_dead_lettered_whole(stack, source, prefix,
                                                                        start):
    execute(source, "create table pages (id int primary key, body text)",
            "insert into pages values (1, 'small')",
            "insert into pages select 2, string_agg(md5(g::text), '') "
            "from generate_series(1, 2000) g")  # 64 kB: over the topic's 20 kB
    start(skip_snapshot=True, topic_config={"max.message.bytes": "20000"})
    wait_streaming(source, prefix)
    asked = subprocess.run([sys.executable, "-m", "bottler", "capture", "snapshot", "pages",
                            "-d", source, "-s", prefix], capture_output=True, text=True,
                           timeout=60, cwd=ROOT)
    assert asked.returncode == 0, asked.stderr
    assert [dict(k)["id"] for k in topic_state(stack, f"{prefix}.pages", 1)] == [1]
    topic = f"{prefix}._bottler.capture-dead-letter"
    [msg] = wait_for(lambda: read_topic(stack.kafka, topic), 30, "the dead letter")
    letter = json.loads(msg.value())
    assert (letter["table"], letter["op"], letter["key"]) == ("public.pages", "snapshot",
                                                              {"id": "2"})
    assert letter["columns"] == {"id": "2", "body": rows(source, "select body from pages "
                                                         "where id = 2")[0][0]}


def test_a_dead_letter_kafka_refuses_stops_the_capture_without_confirming_the_row(stack, prefix):
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    table_topic = f"{prefix}.docs"
    on_error = OnError.of("dead-letter", prefix, prefix)
    ensure_topics(admin, [table_topic], config={"max.message.bytes": "20000"})
    ensure_topics(admin, [], [on_error.topic], config={"max.message.bytes": "1000"})  # too small
    config = producer_config({}, {"max.message.bytes": "20000"})
    publisher = Publisher(stack.kafka, config, ErrorPolicy(on_error, stack.kafka, config))
    batch = publisher.tracker.open()
    body = os.urandom(30000).hex()  # refused by the broker for the table topic
    value = body.encode()
    assert publisher.at_risk(b"1", value)
    row = Row("public.docs", table_topic, ("id", "body"), ("id",), ("1", body), "insert", 100)
    publisher.send(table_topic, b"1", value, batch, row=row)
    publisher.tracker.seal(batch, 100)

    with pytest.raises(BottlerError) as stopped:
        publisher.flush(30)
    assert f"cannot write the dead letter of a row of public.docs to {on_error.topic}" in str(
        stopped.value)
    assert publisher.tracker.confirmed() < 100  # the row's position is never confirmed
    assert batch.pending == 1  # its dead letter was never acknowledged
