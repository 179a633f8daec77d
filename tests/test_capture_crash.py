"""Crash safety: `kill -9` the capture at random moments, during the snapshot and the stream,
under a sustained write load; after restarts every committed row is in Kafka."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

from tests.support.databases import WriteLoad, execute, rows
from tests.support.topics import Decoder, read_topic
from tests.support.waiting import wait_for, wait_streaming

SNAPSHOT_KILLS = 2  # while the initial copy runs (it takes a few seconds)
STREAM_KILLS = 5  # while the stream runs
ROWS_BEFORE = 60_000


class Writer(WriteLoad):
    """Inserts and updates until stopped."""

    seed, pause = 7, 0.002

    def transaction(self, conn, rnd) -> None:
        for _ in range(rnd.randint(1, 5)):
            conn.execute("insert into ledger (v, note) values (0, 'new')")
        conn.execute("update ledger set v = v + 1, note = 'updated' where id = %s",
                     (rnd.randint(1, ROWS_BEFORE),))


def start_capture(stack, source, prefix, log):
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "capture", "-d", source, "-s", prefix,
         "-b", stack.kafka, "-r", stack.registry_url, "-p", prefix,
         "--snapshot-workers", "2", "--heartbeat-interval", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )


def crash(proc) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the capture and its snapshot workers, like a lost host
    proc.wait(30)


def test_kill_9_at_random_moments_loses_nothing(stack, source, prefix, tmp_path):
    execute(
        source,
        "create table ledger (id bigserial primary key, v int not null, note text)",
        f"insert into ledger (v, note) select 0, 'initial' from generate_series(1, {ROWS_BEFORE})",
    )
    writer = Writer(source)
    writer.start()
    rnd = random.Random(42)
    log = open(tmp_path / "capture.log", "ab")  # noqa: SIM115
    try:
        proc = start_capture(stack, source, prefix, log)
        for kill in range(SNAPSHOT_KILLS + STREAM_KILLS):
            if kill < SNAPSHOT_KILLS:
                time.sleep(rnd.uniform(1.0, 2.0))
            else:
                wait_streaming(source, prefix)
                time.sleep(rnd.uniform(0.1, 2.0))
            assert proc.poll() is None, (tmp_path / "capture.log").read_text()[-3000:]
            crash(proc)
            proc = start_capture(stack, source, prefix, log)
        time.sleep(2)
        writer.stopped.set()
        writer.join(30)
        expected = dict(rows(source, "select id, v from ledger"))
        decoder = Decoder(stack.registry_url)

        def all_arrived():
            assert proc.poll() is None, (tmp_path / "capture.log").read_text()[-3000:]
            state = decoder.table_state(read_topic(stack.kafka, f"{prefix}.ledger"))
            return state if len(state) >= len(expected) else None

        state = wait_for(all_arrived, 180, "every committed row")
        published = {dict(k)["id"]: v["v"] for k, v in state.items()}
        assert published == expected  # every row, each with its last committed value
        assert writer.error is None, writer.error
        assert writer.commits > 100
    finally:
        writer.stopped.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        log.close()
