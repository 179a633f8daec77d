"""The `bottler` command as a user meets it: a child process (in an environment of its own or the
caller's), its one-line errors, and the tables it prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout
LIBRDKAFKA = re.compile(r"%\d\|\d+\.\d+\|")  # librdkafka's log lines on stderr


def clean_env(**extra: str) -> dict[str, str]:
    """The environment for a child `bottler`: nothing of the caller's BOTTLER_* settings, nor
    the developer's `make up` stack in the checkout (`.stack`, which `status` would read)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BOTTLER_")}
    env["BOTTLER_STACK_DIR"] = "/nonexistent/bottler-tests-have-no-stack-here"
    for bare in ("POSTGRES", "BROKER", "SCHEMA_REGISTRY"):
        env.pop(bare, None)
        env.pop(bare.lower(), None)
    return env | extra


def bottler(*args: str, env: dict[str, str | None] | None = None, timeout: float = 60,
            clean: bool = True) -> subprocess.CompletedProcess:
    """`python -m bottler ARGS`, its output captured: in :func:`clean_env` (plus ``env``), or
    with ``clean=False`` in the caller's environment (``env`` changing it, None unsetting)."""
    if clean:
        environment = clean_env(**{k: v for k, v in (env or {}).items() if v is not None})
    else:
        changed = {**os.environ, **(env or {})}
        environment = {k: v for k, v in changed.items() if v is not None}
    return subprocess.run(
        [sys.executable, "-m", "bottler", *args], capture_output=True, text=True,
        timeout=timeout, cwd=ROOT, env=environment,
    )


def assert_clear_error(proc, *fragments: str, secrets: tuple[str, ...] = ()) -> str:
    """Exit code 2, no traceback, the error as one line plus one hint line (the last output, but
    for librdkafka's own lines), each fragment in them, and no secret anywhere in the output
    (logs included)."""
    output = proc.stdout + proc.stderr
    for secret in secrets:
        assert secret not in output, f"a password leaked into the output:\n{output}"
    assert "Traceback" not in output, output
    assert proc.returncode == 2, f"exit code {proc.returncode}:\n{output}"
    # librdkafka writes its own lines (`%3|...|FAIL|...`) from its threads, even after ours.
    lines = [line for line in proc.stderr.rstrip("\n").splitlines() if not LIBRDKAFKA.match(line)]
    starts = [i for i, line in enumerate(lines) if line.startswith("error: ")]
    assert len(starts) == 1, f"expected one error line:\n{proc.stderr}"
    i = starts[0]
    assert len(lines) == i + 2, f"expected the error line then one hint line:\n{proc.stderr}"
    message, hint = lines[i].removeprefix("error: "), lines[i + 1]
    assert hint.startswith("  → ") and len(hint.strip()) > 10, f"no actionable hint:\n{hint}"
    text = f"{message}\n{hint}"
    for fragment in fragments:
        assert fragment in text, f"{fragment!r} not in:\n{text}"
    return text


def services(stack) -> list[str]:
    return ["-b", stack.kafka, "-r", stack.registry_url]


def cells(output: str, first: str) -> list[str] | None:
    """The cells of the table row whose first cell is ``first``."""
    for line in output.splitlines():
        parts = [p.strip() for p in line.split("│")]
        if len(parts) > 1 and parts[0] == first:
            return parts
    return None


def row_of(output: str, first: str) -> list[str] | None:
    """The cells of a boxed table's row (`bottler stack status`) whose first cell is ``first``."""
    for line in output.splitlines():
        parts = [p.strip() for p in line.split("│")][1:-1]
        if parts and parts[0] == first:
            return parts
    return None
