"""Waiting in tests: for a condition, for a capture to stream or finish its snapshot; a loop
run in a thread for the body of a `with`."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg


def wait_snapshot_done(capture, log, metrics_port: int, timeout: float) -> None:
    """Wait until the capture process ``capture`` (its output in ``log``) says on its metrics
    endpoint that its snapshot is complete; fail with its log's end should it exit first."""
    import httpx

    def done() -> bool:
        assert capture.poll() is None, log.read_text()[-3000:]
        try:
            page = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=1).text
        except httpx.HTTPError:
            return False
        return "bottler_capture_snapshot_complete 1.0" in page

    wait_for(done, timeout, "the capture's snapshot")


def wait_for(predicate: Callable[[], object], timeout: float = 30, what: str = "condition"):
    from tests.support.capture import CaptureThread

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        CaptureThread.raise_failures()
        if result := predicate():
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@contextmanager
def in_thread(run: Callable[[threading.Event], object]) -> Iterator[list[BaseException]]:
    """``run(stop)`` (a reader's or runner's loop) in a thread for the body of the ``with``.
    Yields the list its exception lands in, for the test to check while it waits; on exit sets
    ``stop``, waits for the thread and raises that exception."""
    stop = threading.Event()
    failure: list[BaseException] = []

    def target():
        try:
            run(stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield failure
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    if failure:
        raise failure[0]


def wait_streaming(dsn: str, slot: str, timeout: float = 60) -> None:
    """Wait until a capture streams from ``slot`` (its snapshot, if any, is complete).

    The slot is active during the snapshot too (the connection that exported the snapshot holds
    it, its walsender in state `startup`); only START_REPLICATION moves the walsender on to
    `catchup` and `streaming`."""

    def active():
        with psycopg.connect(dsn) as conn:
            return conn.execute(
                "select r.state in ('catchup', 'streaming') from pg_replication_slots s"
                " join pg_stat_replication r on r.pid = s.active_pid where s.slot_name = %s",
                (slot,)).fetchone() == (True,)

    wait_for(active, timeout, f"a capture streaming from slot {slot}")


def stop_gracefully(process: subprocess.Popen, grace: float = 60.0) -> None:
    """SIGTERM (a JVM node's graceful shutdown), then a kill if it takes over ``grace`` s."""
    process.terminate()
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
