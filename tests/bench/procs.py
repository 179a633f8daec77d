"""Processes under measurement: the capture as a child process (`python -m bottler capture`),
its log lines with arrival times, its peak memory (VmHWM) and that of its worker processes,
and the CPU time each part of the stack spends during a measurement."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
SNAPSHOT_DONE = r"snapshot: (\d+) rows"  # the capture's line once its snapshot is in Kafka
SAMPLE_EVERY = 0.25  # seconds between memory samples


def unwind_on_sigterm(bench: str) -> None:
    """SIGTERM (a timeout, ^C's cousin) unwinds as an exception: the bench's stack, slots and
    scratch directories are cleaned up by their finally blocks, as at its end (killed
    otherwise, its stack's servers would outlive it)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"{bench}: terminated"))


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat from field 3 (state) on: rest[1] ppid, rest[11:15] CPU ticks."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (rest := _stat(int(entry.name))):
            children.setdefault(int(rest[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _kb(path: str, field: str) -> int:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def peak_kb(pid: int) -> int:
    """The process's peak resident set (VmHWM), 0 once it is gone."""
    return _kb(f"/proc/{pid}/status", "VmHWM:")


def pss_kb(pid: int) -> int:
    """The process's proportional set size now: shared pages divided among their users."""
    return _kb(f"/proc/{pid}/smaps_rollup", "Pss:")


def _is_worker(pid: int) -> bool:
    """A multiprocessing worker (not its resource tracker or another helper)."""
    try:
        return b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _own_and_reaped(rest: list[str]) -> int:
    return sum(int(x) for x in rest[11:15])  # utime stime cutime cstime, in ticks


def cpu_seconds(root: int) -> float:
    """CPU time of a process and all its descendants, living or already reaped by one of them
    (each process's own time and its waited-for children's). Not the time of a child whose
    parent ignores SIGCHLD (pyspark's daemons): see :func:`cpu_over`."""
    return sum(_own_and_reaped(rest) for pid in (root, *descendants(root))
               if (rest := _stat(pid))) / TICK


def cpu_over(roots: dict[str, int], seconds: float, every: float = 0.5) -> dict[str, float]:
    """CPU seconds each process tree spent over ``seconds``, from per-process samples taken
    every ``every`` seconds. pyspark's daemons ignore SIGCHLD, so the time of a Spark worker
    that ends reaches no parent: a tree's total (:func:`cpu_seconds`) drops when one ends, and
    a window's figure could come out negative. Here each process counts what it spent while
    seen (a process born and ended between two samples is missed)."""
    first: dict[tuple, int] = {}
    last: dict[tuple, int] = {}
    end = time.monotonic() + seconds
    initial = True  # the first pass's processes count from where they stand, later ones from 0
    while True:
        for name, root in roots.items():
            for pid in (root, *descendants(root)):
                if rest := _stat(pid):
                    key = (name, pid, rest[19])  # its start time: a pid may be reused
                    first.setdefault(key, _own_and_reaped(rest) if initial else 0)
                    last[key] = _own_and_reaped(rest)
        initial = False
        if time.monotonic() >= end:
            break
        time.sleep(min(every, max(0.0, end - time.monotonic())))
    spent = dict.fromkeys(roots, 0.0)
    for key, ticks in last.items():
        spent[key[0]] += (ticks - first[key]) / TICK
    return spent


class CpuMeter:
    """CPU seconds spent by named process trees (postgres, broker, capture) over a span."""

    def __init__(self, roots: dict[str, int | None]):
        self.roots = {k: v for k, v in roots.items() if v}
        self._start: dict[str, float] = {}
        self._t0 = 0.0

    def start(self) -> CpuMeter:
        self._t0 = time.monotonic()
        self._start = {k: cpu_seconds(p) for k, p in self.roots.items()}
        return self

    def note(self) -> str:
        wall = time.monotonic() - self._t0
        used = ", ".join(
            f"{k} {cpu_seconds(p) - self._start[k]:.1f}" for k, p in self.roots.items()
        )
        return f"CPU seconds over {wall:.1f} s of wall time: {used}"


class CaptureProcess:
    """`python -m bottler capture ARGS` with the stack's endpoints in its environment (so no
    password reaches the command line), watched while it runs."""

    def __init__(self, name: str, env: dict[str, str], args: list[str]):
        self.name = name
        self.args = args
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.lines: list[tuple[float, str]] = []
        self.peak_kb = 0  # the capture process itself, the largest of its runs
        self.worker_peaks: dict[int, int] = {}  # this run's multiprocessing workers, by pid
        self._run_kb = 0  # this run's capture process
        self._largest: tuple[int, list[int]] = (0, [])  # an earlier run's: see largest_run
        self.peak_pss_kb = 0  # of the process and its workers together, as sampled
        self._cond = threading.Condition()
        self._proc: subprocess.Popen | None = None
        self.started_at = 0.0

    @property
    def pid(self) -> int:
        return self._proc.pid

    def start(self) -> CaptureProcess:
        """Start the process (again: a stopped capture may be restarted)."""
        self.started_at = time.monotonic()
        self.lines = []
        self._largest = self.largest_run()
        self._run_kb, self.worker_peaks = 0, {}
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "bottler", "capture", *self.args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=self.env, text=True,
            errors="replace",
        )
        threading.Thread(target=self._read, args=(self._proc,), daemon=True).start()
        threading.Thread(target=self._sample, args=(self._proc,), daemon=True).start()
        return self

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            with self._cond:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def _sample(self, proc: subprocess.Popen) -> None:
        while proc.poll() is None:
            self._run_kb = max(self._run_kb, peak_kb(proc.pid))
            self.peak_kb = max(self.peak_kb, self._run_kb)
            pss = pss_kb(proc.pid)
            for pid in descendants(proc.pid):
                if pid in self.worker_peaks or _is_worker(pid):
                    self.worker_peaks[pid] = max(self.worker_peaks.get(pid, 0), peak_kb(pid))
                    pss += pss_kb(pid)
            self.peak_pss_kb = max(self.peak_pss_kb, pss)
            time.sleep(SAMPLE_EVERY)

    def wait_line(self, pattern: str, timeout: float = 120) -> tuple[float, re.Match]:
        """The arrival time and match of the first log line matching ``pattern``."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for t, line in self.lines[seen:]:
                    if m := regex.search(line):
                        return t, m
                seen = len(self.lines)
                if self._proc.poll() is not None and seen == len(self.lines):
                    self._fail(f"exited with status {self._proc.returncode} before logging "
                               f"/{pattern}/")
                if time.monotonic() > deadline:
                    self._fail(f"did not log /{pattern}/ within {timeout:.0f}s")
                self._cond.wait(0.2)

    def check_alive(self) -> None:
        if self._proc.poll() is not None:
            self._fail(f"exited with status {self._proc.returncode}")

    def _fail(self, what: str):
        tail = "\n".join(f"    {line}" for _, line in self.lines[-30:])
        raise RuntimeError(f"capture {self.name} {what}; its last lines:\n{tail}")

    def stop(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._run_kb = max(self._run_kb, peak_kb(self.pid))
            self.peak_kb = max(self.peak_kb, self._run_kb)
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
                raise RuntimeError(f"capture {self.name} did not stop on SIGTERM") from None
        if self._proc.returncode not in (0, -signal.SIGTERM):
            self._fail(f"ended with status {self._proc.returncode}")

    @property
    def peak_mb(self) -> float:
        return self.peak_kb / 1024

    @property
    def peak_pss_mb(self) -> float:
        return self.peak_pss_kb / 1024

    @property
    def workers_peak_mb(self) -> float:
        return sum(self.worker_peaks.values()) / 1024

    def largest_run(self) -> tuple[int, list[int]]:
        """Of every run so far, the one whose process and workers together peaked highest:
        (the process's VmHWM, each worker's), in kB. Workers of different runs never run at
        once, so they are not summed across runs."""
        run = (self._run_kb, list(self.worker_peaks.values()))
        return max(self._largest, run, key=lambda r: r[0] + sum(r[1]))


@contextmanager
def running(capture: CaptureProcess) -> Iterator[CaptureProcess]:
    capture.start()
    try:
        yield capture
    finally:
        capture.stop()
