"""Supervision in the embedded stack (issue 14): a process that fails is started again, with
backoff, and `bottler stack status` and `bottler status` show its restarts and its last error
line; a stop (or `stack down`) is never answered with a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from compose.procs import pid_alive
from compose.stack import isolated_stack
from compose.supervise import (
    BACKOFF_MAX,
    HEALTHY,
    State,
    backoff,
    hold_file,
    last_error_line,
)
from tests.support.cli import bottler, cells, row_of
from tests.support.own_stack import Tracker
from tests.support.waiting import wait_for


def test_the_last_error_line_is_the_last_error_or_exception_of_the_run(tmp_path):
    log = tmp_path / "log"
    log.write_text("error: an earlier run's\n")
    since = log.stat().st_size
    with open(log, "a") as f:
        f.write("2026-01-01 00:00:00,000 ERROR capture.run: a logged error\n"
                "Traceback (most recent call last):\n"
                '  File "x.py", line 1, in <module>\n'
                "    raise AdminShutdown('terminating connection')\n"
                "psycopg2.errors.AdminShutdown: terminating connection (postgresql://u:pw@h/db)\n"
                "[supervise] 2026-01-01 00:00:01 capture exit code 1; restart 1 in 1 s\n")
    assert last_error_line(log, since) == (
        "psycopg2.errors.AdminShutdown: terminating connection (postgresql://u:***@h/db)")
    with open(log, "a") as f:
        f.write("INFO all well\n")
    assert last_error_line(log, log.stat().st_size) is None


# A program that fails its first run (an error line, then exit 3) and runs until stopped after.
FLAKY = """
import os, sys, time
runs = {runs!r}
n = int(open(runs).read()) + 1 if os.path.exists(runs) else 1
open(runs, "w").write(str(n))
print(f"run {{n}}", flush=True)
if n == 1:
    print("2026-01-01 00:00:00,000 INFO app: starting", flush=True)
    print("error: the first run fails", file=sys.stderr, flush=True)
    print("  → a hint that is not the error", file=sys.stderr, flush=True)
    sys.exit(3)
time.sleep(600)
"""


def supervise(tmp_path: Path, program: str, hold: Path | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "compose.supervise", "--name", "flaky",
            "--state", str(tmp_path / "state.json"), "--log", str(tmp_path / "log")]
    if hold:
        argv += ["--hold", str(hold)]
    with open(tmp_path / "log", "ab") as log:
        return subprocess.Popen([*argv, "--", sys.executable, "-c", program],
                                stdout=log, stderr=subprocess.STDOUT)


def state(tmp_path: Path) -> State | None:
    return State.read(tmp_path / "state.json")


def running(tmp_path: Path, restarts: int) -> State | None:
    s = state(tmp_path)
    return s if s and s.state == "running" and s.restarts == restarts else None


def test_backoff_doubles_up_to_a_minute_and_starts_over_after_a_healthy_run():
    waits, wait = [], None
    for _ in range(9):
        wait = backoff(wait, ran=2.0)
        waits.append(wait)
    assert waits == [1, 2, 4, 8, 16, 32, BACKOFF_MAX, BACKOFF_MAX, BACKOFF_MAX]
    assert backoff(BACKOFF_MAX, ran=HEALTHY) == 1


def test_a_failed_run_is_restarted_and_a_stop_is_passed_on(tmp_path):
    sup = supervise(tmp_path, FLAKY.format(runs=str(tmp_path / "runs")))
    try:
        second = wait_for(lambda: running(tmp_path, 1), 20, "the restart")
        assert second.last_exit == "exit code 3"
        assert second.last_error == "error: the first run fails"
        assert second.pid != sup.pid and pid_alive(second.pid)
        wait_for(lambda: "run 2" in (tmp_path / "log").read_text(), 20, "the second run")
        log = (tmp_path / "log").read_text()
        assert "[supervise]" in log and "flaky exit code 3; restart 1 in 1 s" in log
        sup.send_signal(signal.SIGTERM)  # as `stack down` does: passed on, not restarted
        assert sup.wait(10) == 0
        assert not pid_alive(second.pid)
        assert state(tmp_path).state == "stopped" and state(tmp_path).restarts == 1
        assert "run 3" not in (tmp_path / "log").read_text()
    finally:
        sup.kill()


def test_kill_9_is_a_failure_and_the_child_dies_with_its_supervisor(tmp_path):
    sup = supervise(tmp_path, FLAKY.format(runs=str(tmp_path / "runs")))
    try:
        first = wait_for(lambda: running(tmp_path, 1), 20, "the restart")
        os.kill(first.pid, signal.SIGKILL)  # the OOM killer's way: restarted (after 2 s)
        third = wait_for(lambda: running(tmp_path, 2), 20, "the second restart")
        assert third.last_exit == "killed by SIGKILL" and third.last_error is None
        assert third.pid != first.pid
        sup.kill()  # the supervisor itself: its child goes too
        sup.wait()
        wait_for(lambda: not pid_alive(third.pid), 5, "the child to end with its supervisor")
    finally:
        sup.kill()


@pytest.mark.parametrize("ending", ["exit 0", "SIGTERM to the child"])
def test_a_clean_exit_or_a_stop_signal_ends_the_supervision(tmp_path, ending):
    program = ("import sys, time; print('up', flush=True); "
               + ("sys.exit(0)" if ending == "exit 0" else "time.sleep(600)"))
    sup = supervise(tmp_path, program)
    try:
        if ending != "exit 0":
            os.kill(wait_for(lambda: running(tmp_path, 0), 20, "the child").pid, signal.SIGTERM)
        assert sup.wait(10) == 0
        assert state(tmp_path).state == "stopped" and state(tmp_path).restarts == 0
    finally:
        sup.kill()


def test_nothing_is_restarted_while_stack_down_runs(tmp_path):
    hold = tmp_path / "run" / "down.pid"
    hold.parent.mkdir()
    hold.write_text(f"{os.getpid()}\n")  # a `down` under way: this process
    sup = supervise(tmp_path, FLAKY.format(runs=str(tmp_path / "runs")), hold)
    try:
        assert sup.wait(20) == 0
        assert state(tmp_path).state == "stopped" and state(tmp_path).restarts == 1
        assert (tmp_path / "runs").read_text() == "1"  # never started again
        assert "not restarted: the stack is going down" in (tmp_path / "log").read_text()
    finally:
        sup.kill()


# -- the stack: the capture loses its connection, is restarted and shown ---------------------


@pytest.mark.stack  # a stack of its own
@pytest.mark.timeout(300)
def test_a_stack_app_that_fails_is_restarted_and_shown_and_down_leaves_nothing():
    with isolated_stack() as stack, Tracker(stack.root) as tracker:
        assert hold_file(stack.root).parent == stack.root / "run"
        stack.up(apps=("capture",), demo=True)
        at = ("--dir", str(stack.root))
        first = stack.supervision()["capture"]
        assert first.state == "running" and first.restarts == 0
        wait_for(lambda: (row := cells(bottler("status", "--once", *at, clean=False).stdout,
                                       "capture"))
                 and row[2] == "streaming", 60, "the capture to stream")

        # The server ends the capture's replication connection: it exits with an error (2).
        with psycopg.connect(stack.endpoints.pg_dsn, autocommit=True) as conn:
            wait_for(lambda: conn.execute(
                "select pg_terminate_backend(active_pid) from pg_replication_slots "
                "where slot_name = 'bottler' and active_pid is not null").fetchall(),
                30, "the capture's walsender")

        def restarted() -> bool:
            s = stack.supervision().get("capture")
            out = bottler("status", "--once", *at, clean=False).stdout
            row = cells(out, "capture")
            return (s is not None and s.state == "running" and s.restarts >= 1
                    and row is not None and row[2] == "streaming" and (s, out))

        again, view = wait_for(restarted, 60, "the capture to stream again")
        assert again.pid != first.pid and pid_alive(again.pid) and not pid_alive(first.pid)
        assert again.restarts == 1, again
        assert again.last_exit == "exit code 2", again
        assert again.last_error.startswith(
            "error: lost the connection to PostgreSQL while streaming"), again
        assert stack.status()["capture"] is not None

        # `bottler status`: the restarts column, and the last error line under the table.
        assert cells(view, "capture")[6] == "1", view
        assert "capture restarted 1 time" in view
        assert "lost the connection to PostgreSQL while streaming" in view
        # `bottler stack status`: its own PID, the restarts, the last error line.
        listing = bottler("stack", "status", *at, clean=False)
        assert listing.returncode == 0, listing.stdout + listing.stderr
        row = row_of(listing.stdout, "capture metrics")
        assert row[1:5] == ["capture", "running", str(again.pid), "1"], listing.stdout
        assert "lost the connection to PostgreSQL while streaming" in listing.stdout

        outcome = stack.down()
        assert outcome["capture"] == "stopped", outcome
        time.sleep(0.5)  # a restart would show now: none may come
        assert tracker.alive() == []
        assert stack.supervision() == {}
