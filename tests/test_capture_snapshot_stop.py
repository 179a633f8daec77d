"""A capture stops within seconds during its snapshot (SIGTERM), leaves no snapshot worker behind
when killed (`kill -9` of the capture alone), and the restarted snapshot resumes from the chunks
Kafka acknowledged instead of starting over (issue 13): it publishes again at most the piece (a
quarter chunk) each worker had in hand, by design (capture/snapshot/exported.py, _copy_chunk)."""

from __future__ import annotations

import os
import signal
import time

import pytest

from capture.snapshot.exported import PIECES, Chunk
from tests.support.capture import CHUNK_PAGES, WORKERS, start_capture
from tests.support.databases import execute, rows
from tests.support.topics import copied, read_topic
from tests.support.waiting import wait_for, wait_streaming

ROWS = 300_000


def group_alive(pgid: int) -> bool:
    """Whether any process of the capture's process group (its workers included) is alive."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(_pgid(pid) == pgid for pid in os.listdir("/proc") if pid.isdigit())


def _pgid(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else int(fields[2])
    except (OSError, IndexError):
        return None


@pytest.mark.parametrize("how", ["sigterm", "kill-9"])
def test_a_snapshot_stops_within_seconds_and_resumes_where_it_stopped(
    stack, source, prefix, tmp_path, how
):
    execute(source, "create table big (id int primary key, pad text)",
            f"insert into big select g, repeat('p', 80) from generate_series(1, {ROWS}) g",
            "vacuum analyze big")
    pages = rows(source, "select relpages from pg_class where relname = 'big'")[0][0]
    chunk_rows = ROWS * CHUNK_PAGES // pages + 1
    page_rows = rows(source, "select max(n) from (select count(*) n from big "
                             "group by (ctid::text::point)[0]) p")[0][0]
    piece_rows = -(-CHUNK_PAGES // PIECES) * page_rows
    topic = f"{prefix}.big"
    log_path = tmp_path / "capture.log"
    log = open(log_path, "ab")  # noqa: SIM115 - closed below
    proc = start_capture(stack, source, prefix, log)
    try:
        def mid_snapshot():
            assert proc.poll() is None, log_path.read_text()[-3000:]
            return copied(stack, topic) >= 4 * chunk_rows

        wait_for(mid_snapshot, 120, "the snapshot to be under way")
        assert copied(stack, topic) < ROWS - 2 * chunk_rows, "the snapshot ended too soon"
        if how == "sigterm":
            stopped_at = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(10) == 0, log_path.read_text()[-3000:]
            took = time.monotonic() - stopped_at
            print(f"sigterm: stopped in {took:.1f}s")
            assert took < 10
            assert "stop requested" in log_path.read_text()
        else:
            proc.kill()  # the capture alone: its workers must not outlive it
            proc.wait(10)
        wait_for(lambda: not group_alive(proc.pid), 10, "no process of the capture left")
        before = copied(stack, topic)

        proc = start_capture(stack, source, prefix, log)
        wait_streaming(source, prefix, timeout=180)
        assert "resuming the snapshot" in log_path.read_text()
        messages = read_topic(stack.kafka, topic)
        assert len({m.key() for m in messages}) == ROWS  # every row
        duplicates = len(messages) - ROWS
        partly = log_path.read_text().count("resume after their acknowledged pieces")
        print(f"{how}: {duplicates} duplicates ({before} rows published before the stop; "
              f"{chunk_rows} rows per chunk, {piece_rows} per piece; resumed within chunks: "
              f"{bool(partly)})")
        assert duplicates < WORKERS * chunk_rows, (duplicates, before, chunk_rows)
        assert duplicates <= WORKERS * piece_rows, (duplicates, before, piece_rows)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        log.close()


def test_a_chunk_is_copied_in_pieces_and_resumes_after_the_acknowledged_ones():
    chunk = Chunk("t@1#0", "public.t", None, 40, 80, (50, 60, 70))
    assert chunk.ranges() == [(40, 50), (50, 60), (60, 70), (70, 80)]
    assert chunk.resumed(60).ranges() == [(60, 70), (70, 80)]
    assert chunk.resumed(60).id == chunk.id  # recorded under the same key as before
    assert chunk.resumed(40) == chunk.resumed(80) == chunk  # outside: a record to ignore
    last = Chunk("t@1#1", "public.t", None, 80, None, (90,))
    assert last.resumed(90).ranges() == [(90, None)]  # the last chunk stays open-ended
