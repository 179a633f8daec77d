"""`--profile DIR`: py-spy samples the capture while it streams (catch-up) and while it
snapshots (workers included), writes the collapsed stacks to DIR and summarises them: where the
CPU time goes, by function, itself and with what it calls. A profiled run's rates are lower
than an unprofiled one's (py-spy pauses the process for every sample); read them as a profile,
not as the benchmark. py-spy is not a dependency: `.venv/bin/pip install py-spy`."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

RATE = 200  # samples per second
TOP = 20

_summaries: list[str] = []  # printed after the report


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise RuntimeError("--profile needs py-spy: .venv/bin/pip install py-spy")
    return found


@contextmanager
def sampled(out: Path | None, name: str, pid: int, subprocesses: bool = False) -> Iterator[None]:
    """Sample process ``pid`` (and its children) for the duration of the block."""
    if out is None:
        yield
        return
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.txt"
    argv = [py_spy(), "record", "--pid", str(pid), "--rate", str(RATE), "--format", "raw",
            "-o", str(path)]
    proc = subprocess.Popen(argv + (["--subprocesses"] if subprocesses else []),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGINT)  # py-spy writes its output and exits
        _, err = proc.communicate(timeout=60)
        if path.exists():
            _summaries.append(summarise(path, name))
        else:
            _summaries.append(f"profile {name}: py-spy wrote nothing: {err.decode()[-500:]}")


ENTRY = re.compile(r"^(<module>|_?main|spawn_main|_process_worker|BaseProcess\.|Thread\._bootstrap"
                   r"|_run_code|_run_module_as_main|Typer|TyperGroup|Command|Context\.invoke"
                   r"|get_callback|capture \(capture/cli|run_capture|Streamer\.run )")


def _trim(frame: str) -> str:
    """Paths relative to site-packages, the stdlib or the project."""
    return re.sub(r"\((?:/[^()]*/(?:site-packages|python3\.\d+)/|/work/main/)", "(", frame)


def _function(frame: str) -> str:
    """`encode (schemas/serde.py:27)` → `encode (schemas/serde.py)`."""
    return re.sub(r":\d+\)$", ")", frame)


def _frames(stack: str) -> tuple[str | None, list[str]]:
    """(the innermost process, with --subprocesses; the frames, outermost first). A process's
    command line may hold semicolons: it ends at the first part that closes its quote."""
    parts = stack.split(";")
    process = None
    while parts and parts[0].startswith("process "):
        end = next((i for i, f in enumerate(parts) if f.endswith('"')), 0)
        process = parts[0].split(":")[0]
        parts = parts[end + 1:]
    return process, [_trim(f) for f in parts]


def summarise(path: Path, name: str) -> str:
    own: Counter[str] = Counter()
    own_lines: Counter[str] = Counter()
    total_with: Counter[str] = Counter()
    processes: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        process, frames = _frames(stack)
        if process:
            processes[process] += n
        total += n
        if frames:
            own[_function(frames[-1])] += n
            own_lines[frames[-1]] += n
        for f in {_function(f) for f in frames}:
            if not ENTRY.match(f):
                total_with[f] += n
    if not total:
        return f"profile {name}: no samples"
    lines = [f"profile {name}: {total:,} samples of busy threads at {RATE}/s ({path}); a C "
             "extension's time counts as its Python caller's own"]
    if len(processes) > 1:
        lines.append("  by process: " + ", ".join(
            f"{p} {100 * n / total:.0f}%" for p, n in processes.most_common()))
    for title, counter in (("own time, by function", own), ("own time, by line", own_lines),
                           ("with callees", total_with)):
        lines.append(f"  {title}:")
        lines += [f"    {100 * n / total:5.1f}%  {f}" for f, n in counter.most_common(TOP)]
    return "\n".join(lines)


def summaries() -> list[str]:
    return list(_summaries)
