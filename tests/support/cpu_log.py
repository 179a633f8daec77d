"""Where the suite's CPU goes: with ``BOTTLER_TEST_CPU_LOG=<file>``, each test appends a line
``<wall s> <cpu s> <nodeid>`` to ``<file>.<worker>``: its wall time, and the CPU time its worker
and every process under it spent meanwhile (the services its fixtures started, the commands it
ran). The suite is CPU-bound on 2 cores, so the CPU column, not the wall one, says what to make
cheaper:

    BOTTLER_TEST_CPU_LOG=/tmp/cpu make test
    cat /tmp/cpu.* | sort -k2 -n -r | head -40
"""

from __future__ import annotations

import os
import time

import pytest

from tests.bench.procs import cpu_seconds


def _log_file(config) -> str | None:
    base = os.environ.get("BOTTLER_TEST_CPU_LOG")
    if not base:
        return None
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    return f"{base}.{worker}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = _log_file(item.config)
    if path is None:
        return (yield)
    wall, cpu = time.monotonic(), cpu_seconds(os.getpid())
    try:
        return (yield)
    finally:
        with open(path, "a") as out:
            out.write(f"{time.monotonic() - wall:.2f} {cpu_seconds(os.getpid()) - cpu:.2f} "
                      f"{item.nodeid}\n")
