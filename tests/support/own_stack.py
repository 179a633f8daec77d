"""A stack of a test's own, made by `bottler stack up` in a directory of its own (the `root`
fixture: stopped and removed at the end), its errors, and the processes tied to it (Tracker)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

from common.errors import BottlerError
from compose.stack import Stack, new_stack_dir
from tests.support.cli import bottler


@pytest.fixture
def root():
    base = new_stack_dir()
    yield base / "stack"
    with contextlib.suppress(BottlerError):
        Stack(base / "stack").down()
    shutil.rmtree(base, ignore_errors=True)


def stack_up(root: Path, ports: dict[str, int], **env: str | None):
    """`bottler stack up` as a user runs it, with ``env`` changed (None: unset)."""
    return bottler("stack", "up", "--dir", str(root), *port_flags(ports), env=env, timeout=300,
                   clean=False)


def port_flags(ports: dict[str, int]) -> list[str]:
    """``--kafka-port 9092 ...``: the ports `bottler stack up` is to use."""
    return [word for name, port in ports.items()
            for word in (f"--{name.replace('_', '-')}-port", str(port))]


def one_error(done: subprocess.CompletedProcess, *said: str) -> str:
    """The failed command's message: one error, no traceback, saying each of ``said``."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    message = " ".join(done.stderr.split())  # rich wraps long lines
    assert message.count("error:") == 1, done.stderr
    for words in said:
        assert words in message, done.stderr
    return message


def nothing_runs(root: Path) -> None:
    stack = Stack(root)
    assert not any(stack.status().values()), stack.status()
    assert not (root / "run" / "broker.pid").exists()


Key = tuple[int, int]  # (pid, start time): one process, even once its PID is reused


def processes() -> dict[int, tuple[int, int, bytes, bytes]]:
    """pid -> (parent pid, start time, command line, environment) of every live process."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:  # another user's process
            environ = b""
        if stat[0] != "Z":
            found[int(entry.name)] = (int(stat[1]), int(stat[19]), cmdline, environ)
    return found


class Tracker:
    """Polls /proc in a thread, remembering every process tied to ``root`` (see the module
    docstring); :meth:`alive` lists those still running."""

    def __init__(self, root: Path, interval: float = 0.2):
        self.root = str(root).encode()
        self.interval = interval
        self.seen: dict[Key, str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Tracker:
        self.poll()
        self._thread.start()
        return self

    def __exit__(self, *_) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def poll(self) -> None:
        live = processes()
        with self._lock:
            grew = True
            while grew:  # a new child may be listed before its new parent
                grew = False
                for pid, (ppid, start, cmdline, environ) in live.items():
                    command = cmdline.replace(b"\0", b" ").decode(errors="replace")
                    if (pid, start) in self.seen:
                        self.seen[(pid, start)] = command or self.seen[(pid, start)]  # an exec
                        continue
                    parent = live.get(ppid)
                    if pid != os.getpid() and (
                            self.root in cmdline or self.root in environ
                            or (parent is not None and (ppid, parent[1]) in self.seen)):
                        self.seen[(pid, start)] = command
                        grew = True

    def commands(self) -> list[str]:
        with self._lock:
            return list(self.seen.values())

    def alive(self) -> list[str]:
        """The remembered processes still running (after a last look)."""
        self.poll()
        live = processes()
        with self._lock:
            return [f"{pid}: {cmd[:300]}" for (pid, start), cmd in self.seen.items()
                    if pid in live and live[pid][1] == start]
