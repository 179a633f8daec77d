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
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(f"{pid}\n")

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


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
