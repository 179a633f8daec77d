"""Runs one process of the embedded stack as its child and starts it again when it fails:

    python -m compose.supervise --name capture --state run/capture.state.json -- ARGV...

A failure is a non-zero exit, or a death by any signal but a stop signal (SIGINT, SIGTERM): the
process is started again after a backoff that doubles from 1 s up to 60 s, and starts over at
1 s once a run lasted a healthy minute. An exit 0 or a stop signal ends the supervisor too.
SIGINT and SIGTERM are passed on to the child and end the supervision: once a stop was asked
for, nothing is started again; nor while a `bottler stack down` runs (the hold file holds its
PID), so that `down` never sees a process started behind its back. The child dies with the
supervisor (SIGTERM, so it still stops gracefully), even when the supervisor is killed with
SIGKILL.

The child writes to the supervisor's stdout and stderr (the service's log). What happened is
kept in the state file (JSON, replaced atomically), which `bottler stack status` and
`bottler status` read: the child's PID, the restarts so far, and the last failure with its
last error line from the log."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from common.children import die_with_parent
from common.redact import redact
from compose.procs import PidFile

BACKOFF_FIRST = 1.0  # seconds before the first restart
BACKOFF_MAX = 60.0
HEALTHY = 60.0  # a run this long resets the backoff
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
PREFIX = "[supervise]"  # starts the supervisor's own lines in the log
TAIL = 64 * 1024  # how much of the log's end is searched for the error line

# Lines that say what went wrong: the CLI's `error: ...`, a log record at ERROR or above, an
# exception's line, a Rust panic (the broker). Of a traceback, its exception's line.
ERROR_LINE = re.compile(
    r"^error:|\b(ERROR|CRITICAL|FATAL)\b|^[A-Za-z_][\w.]*(Error|Exception)\b|panicked at")
TRACEBACK = "Traceback (most recent call last):"
# what a process that hangs (waiting for something) says, when it says no error
WARNING_LINE = re.compile(r"\bWARN(ING)?\b")


def hold_file(stack: Path) -> Path:
    """While the process whose PID this file holds runs, no supervisor of ``stack`` restarts
    anything."""
    return stack / "run" / "down.pid"


def backoff(previous: float | None, ran: float) -> float:
    """The wait before the next start: 1 s after a healthy run (or the first failure), else
    twice the previous wait, at most ``BACKOFF_MAX``."""
    if previous is None or ran >= HEALTHY:
        return BACKOFF_FIRST
    return min(previous * 2, BACKOFF_MAX)


def failed(returncode: int) -> bool:
    """An exit that calls for a restart: not a clean exit, not a stop asked for by a signal."""
    return returncode > 0 or (returncode < 0 and -returncode not in STOP_SIGNALS)


def describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def last_error_line(log: Path, since: int, pattern: re.Pattern = ERROR_LINE) -> str | None:
    """The last line of ``log`` past byte ``since`` that reads as an error (masked, shortened);
    or as a warning, given ``WARNING_LINE``."""
    try:
        with open(log, "rb") as f:
            end = f.seek(0, os.SEEK_END)
            f.seek(max(since, end - TAIL))
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    found, traceback = None, False
    for line in text.splitlines():
        if line.startswith(PREFIX) or not line.strip():
            continue
        if line.startswith(TRACEBACK):
            traceback = True
        elif traceback:  # the frames are indented; the exception's line is not
            if not line[0].isspace():
                found, traceback = line, False
        elif pattern.search(line):
            found = line
    return redact(found.strip())[:300] if found else None


@dataclass
class State:
    """The state file's content."""

    name: str
    state: str = "starting"  # running, restarting (waiting for its backoff), stopped
    pid: int | None = None  # the child's, while it runs
    restarts: int = 0
    last_exit: str | None = None  # how the last failed run ended ("exit code 2")
    last_error: str | None = None  # its last error line in the log, if any
    failed_at: float | None = None  # when (epoch seconds)
    next_start: float | None = None  # while restarting: when (epoch seconds)

    @classmethod
    def read(cls, path: Path) -> State | None:
        """The state in ``path``; None when there is none (or it is unreadable)."""
        try:
            data = json.loads(path.read_text())
            return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
        except (OSError, ValueError, TypeError):
            return None

    def write(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self)) + "\n")
        os.replace(tmp, path)


class Supervisor:
    def __init__(self, name: str, argv: list[str], state_path: Path, log: Path | None,
                 hold: Path | None):
        self.argv = argv
        self.path = state_path
        self.log = log  # where the child's output goes, searched for its error line
        self.hold = PidFile(hold, "") if hold else None  # any live PID holds
        self.state = State(name)
        self.child: subprocess.Popen | None = None
        self.stop_signal: int | None = None
        self._told: tuple[subprocess.Popen, int] | None = None  # the last stop passed on
        for sig in STOP_SIGNALS:
            signal.signal(sig, self._on_stop)

    def _on_stop(self, signum: int, _frame) -> None:
        self.stop_signal = signum
        self._forward()

    def _forward(self) -> None:
        """Passes the stop on to the child, once per signal (a second SIGINT may mean "now" to
        some programs); ``send_signal`` skips a child already reaped."""
        if self.child is None or self.stop_signal is None:
            return
        told = (self.child, self.stop_signal)
        if self._told != told:
            self._told = told  # first: the handler may run again while we send
            self.child.send_signal(self.stop_signal)

    def _say(self, message: str) -> None:
        print(f"{PREFIX} {time.strftime('%Y-%m-%d %H:%M:%S')} {self.state.name} {message}",
              flush=True)

    def _save(self, **changes) -> None:
        for key, value in changes.items():
            setattr(self.state, key, value)
        self.state.write(self.path)

    def run(self) -> int:
        wait = None
        parent = os.getpid()
        while True:
            since = self.log.stat().st_size if self.log and self.log.exists() else 0
            started = time.monotonic()
            self.child = subprocess.Popen(
                self.argv, preexec_fn=lambda: die_with_parent(parent, signal.SIGTERM))
            # A stop that came while it was being started reached no child: pass it on now.
            self._forward()
            self._save(state="running", pid=self.child.pid, next_start=None)
            code = self.child.wait()  # a signal's handler runs, then the wait goes on
            if self.stop_signal is not None or not failed(code):  # stopped, as asked
                self._save(state="stopped", pid=None)
                return 0
            wait = backoff(wait, time.monotonic() - started)
            error = last_error_line(self.log, since) if self.log else None
            self._save(state="restarting", pid=None, restarts=self.state.restarts + 1,
                       last_exit=describe(code), last_error=error, failed_at=time.time(),
                       next_start=time.time() + wait)
            self._say(f"{describe(code)}; restart {self.state.restarts} in {wait:g} s")
            if not self._sleep(wait):
                self._save(state="stopped", next_start=None)
                return 0

    def _held(self) -> bool:
        if self.hold is not None and self.hold.running_pid() is not None:
            self._say("not restarted: the stack is going down")
            return True
        return False

    def _sleep(self, seconds: float) -> bool:
        """Waits out the backoff; False as soon as a stop is asked for."""
        deadline = time.monotonic() + seconds
        while self.stop_signal is None and not self._held():
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.1)
        return False


def command(name: str, argv: list[str], stack: Path, state: Path, log: Path) -> list[str]:
    """The command line that runs ``argv`` under a supervisor (it contains ``argv`` whole, so
    what identifies the process behind a PID file still does)."""
    return [sys.executable, "-m", "compose.supervise", "--name", name, "--state", str(state),
            "--log", str(log), "--hold", str(hold_file(stack)), "--", *argv]


def main(args: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compose.supervise", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", required=True, help="the process's name in the stack")
    parser.add_argument("--state", type=Path, required=True, help="the state file (JSON)")
    parser.add_argument("--log", type=Path, help="the log the child writes to (our stdout)")
    parser.add_argument("--hold", type=Path,
                        help="restart nothing while the process whose PID it holds runs")
    parser.add_argument("argv", nargs="+", help="the command to run, after --")
    opts = parser.parse_args(args)
    return Supervisor(opts.name, opts.argv, opts.state, opts.log, opts.hold).run()


if __name__ == "__main__":
    sys.exit(main())
