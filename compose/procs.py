"""Small process helpers for the embedded stack: PID files, port checks, graceful stops."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from common.errors import BottlerError


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_answers(port: int, host: str = "127.0.0.1") -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def wait_until(predicate, timeout: float, what: str, log: Path | None = None) -> None:
    """Poll ``predicate`` until true; on timeout raise an error that points at the log."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    hint = f"see {log}" if log else None
    raise BottlerError(f"{what} did not become ready within {timeout:.0f}s", hint)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); it is dead for our purposes.
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


class PidFile:
    """A PID file that knows which program it belongs to, so a stale or reused PID is ignored."""

    def __init__(self, path: Path, marker: str):
        self.path = path
        self.marker = marker  # a string the process's command line must contain

    def running_pid(self) -> int | None:
        """The PID if our process is alive; a stale file (dead or reused PID) is removed."""
        try:
            pid = int(self.path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            self.path.unlink(missing_ok=True)
            return None
        if pid_alive(pid) and self.marker in cmdline(pid):
            return pid
        self.path.unlink(missing_ok=True)
        return None

    def write(self, pid: int) -> None:
        """Atomically: a reader never sees an empty file (and takes it for a stale one)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(f"{pid}\n")
        os.replace(tmp, self.path)

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


# In the environment of every process the stack starts, as "<service>@<stack dir>"; inherited by
# whatever that process starts in turn (Spark's JVM, workers), so what a service leaves behind
# is found even once orphaned or in a process group of its own.
MARK = "BOTTLER_STACK_PROCESS"


def marked(value: str) -> list[int]:
    """The live processes (other than this one) whose environment holds ``MARK=value``."""
    needle = f"\0{MARK}={value}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if needle in b"\0" + environ and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def end_marked(value: str, settle: float = 1.0, grace: float = 5.0) -> int:
    """End every process marked ``value``: those still there after ``settle`` seconds (a
    helper finishing on its own, as multiprocessing's resource tracker does) get SIGTERM, then
    SIGKILL after ``grace`` seconds. Returns how many had to be signalled."""
    left = gone_within(marked(value), settle)
    signalled = len(left)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        left = gone_within(left, grace)
        if not left:
            break
    return signalled


def gone_within(pids: list[int], timeout: float) -> list[int]:
    """Waits until the processes are gone or ``timeout`` passed; returns those still alive."""
    deadline = time.monotonic() + timeout
    while pids and time.monotonic() < deadline:
        for pid in pids:
            _reap(pid)
        pids = [pid for pid in pids if pid_alive(pid)]
        if pids:
            time.sleep(0.05)
    return pids


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a detached process (own session, so Ctrl-C on the caller does not reach it)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )


def terminate(pid: int, timeout: float = 15.0) -> None:
    """Ask a process to stop (SIGINT, then SIGTERM) and only then kill it."""
    for sig, wait in ((signal.SIGINT, timeout), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            _reap(pid)
            if not pid_alive(pid):
                return
            time.sleep(0.05)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
