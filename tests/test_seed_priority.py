"""While a replica's seed copies from the source (it holds common.seedlock's shared advisory
lock), the capture's snapshot of the same database waits, and stays stoppable; it copies once
the seed's session ends (docs/migration.md, the initial copy)."""

from __future__ import annotations

import signal
import time

import psycopg

from common import seedlock
from tests.support.capture import start_capture
from tests.support.databases import execute
from tests.support.topics import copied
from tests.support.waiting import wait_for

ROWS = 2_000


def _log_has(path, text: str) -> bool:
    return text in path.read_text(errors="replace")


def test_the_snapshot_waits_while_a_seed_copies_and_goes_on_when_it_ends(
    stack, source, prefix, tmp_path
):
    execute(source, "create table seeded (id int primary key, pad text)",
            f"insert into seeded select g, 'p' from generate_series(1, {ROWS}) g")
    topic = f"{prefix}.seeded"
    seed = psycopg.connect(source, autocommit=True)
    looker = psycopg.connect(source, autocommit=True)
    log_path = tmp_path / "capture.log"
    log = open(log_path, "ab")  # noqa: SIM115 - closed below
    proc = None
    try:
        assert not seedlock.running(looker)
        seedlock.hold(seed)
        assert seedlock.running(looker)
        proc = start_capture(stack, source, prefix, log)
        wait_for(lambda: _log_has(log_path, "created slot"), 120, "the capture's slot")
        # the snapshot would copy 2,000 rows in well under a second: give it the chance
        time.sleep(2)
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert copied(stack, topic) == 0, "the snapshot copied while a seed held the lock"
        seed.close()  # the seed's copy ends (or it crashed: its session is gone either way)
        wait_for(lambda: not seedlock.running(looker), 10, "the seed's session to end")
        wait_for(lambda: copied(stack, topic) >= ROWS, 120, "the snapshot after the seed")
        wait_for(lambda: _log_has(log_path, "for a replica's seed copying from the source"),
                 30, "the capture to say it waited")
    finally:
        seed.close()
        looker.close()
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        log.close()


def test_a_capture_waiting_for_a_seed_stops_within_seconds(stack, source, prefix, tmp_path):
    execute(source, "create table waiting (id int primary key)",
            "insert into waiting select generate_series(1, 100)")
    seed = psycopg.connect(source, autocommit=True)
    log_path = tmp_path / "capture.log"
    log = open(log_path, "ab")  # noqa: SIM115 - closed below
    proc = None
    try:
        seedlock.hold(seed)
        proc = start_capture(stack, source, prefix, log)
        wait_for(lambda: _log_has(log_path, "created slot"), 120, "the capture's slot")
        time.sleep(1)  # into its wait for the seed
        stopped_at = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0, log_path.read_text()[-3000:]
        assert time.monotonic() - stopped_at < 10
        assert copied(stack, f"{prefix}.waiting") == 0
    finally:
        seed.close()
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        log.close()
