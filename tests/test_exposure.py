"""Least exposure (issue 13, item 5; issue 25, harm 4): every listener of the embedded stack,
Spark's driver included, on loopback unless the user asks otherwise; metrics served on loopback
unless --metrics-host says otherwise, and a DSN password on the command line (visible in `ps`)
draws one warning line naming the safer places. Through the real command line, against the
session's stack (and a stack of its own running every app)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from psycopg.conninfo import conninfo_to_dict

from compose.procs import MARK, free_port
from compose.stack import isolated_stack
from tests.support.cli import ROOT, bottler, clean_env
from tests.support.listeners import environment_holds, listeners, tree
from tests.support.waiting import wait_for


def outside_address() -> str | None:
    """An address of this machine other than loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: only the route is looked up
        except OSError:
            return None
        address = s.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def answers(host: str, port: int) -> bool:
    try:
        return httpx.get(f"http://{host}:{port}/metrics", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warning: ")]


@pytest.mark.parametrize("host", [None, "0.0.0.0"], ids=["default", "every-interface"])
def test_metrics_listen_on_loopback_unless_asked(stack, target, host):
    outside = outside_address()
    if outside is None:
        pytest.skip("this machine has no address but loopback")
    port = free_port()
    argv = [sys.executable, "-m", "bottler", "materialize", "postgres", "--target", target,
            "--broker", stack.kafka, "--schema-registry", stack.registry_url,
            "--metrics-port", str(port), *(["--metrics-host", host] if host else [])]
    proc = subprocess.Popen(argv, cwd=ROOT, env=clean_env(), stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: proc.poll() is not None or answers("127.0.0.1", port), 60,
                 "the replica's metrics")
        assert proc.poll() is None, proc.stderr.read()
        assert answers(outside, port) == (host == "0.0.0.0")
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=30)
    # the target's password is on the command line: one warning, the password not repeated
    password = conninfo_to_dict(target)["password"]
    assert password and password not in stderr
    [warning] = warnings(stderr)
    assert "--target" in warning and "BOTTLER_TARGET_DSN" in warning and "PGPASSFILE" in warning


def test_a_dsn_password_on_the_command_line_draws_one_warning(stack):
    dsn = stack.pg_dsn
    on_command_line = bottler("slot", "status", "--postgres", dsn)
    assert on_command_line.returncode == 0, on_command_line.stderr
    [warning] = warnings(on_command_line.stderr)
    assert "--postgres" in warning and "BOTTLER_PG_DSN" in warning and "PGPASSFILE" in warning
    assert conninfo_to_dict(dsn)["password"] not in on_command_line.stdout + warning

    in_environment = bottler("slot", "status", env={"BOTTLER_PG_DSN": dsn})
    assert in_environment.returncode == 0, in_environment.stderr
    assert warnings(in_environment.stderr) == []

    both = bottler("migrate", "status", "--source", dsn, "--target", dsn, "--broker", stack.kafka)
    assert [w.split()[4] for w in warnings(both.stderr)] == ["--source", "--target"]


def stack_processes(stack) -> set[int]:
    """Every process of the running stack: those of its PID files, those carrying its mark
    (compose/procs.py: inherited by whatever they start), and all their descendants."""
    roots = {pid for pid in stack.status().values() if pid}
    mark = f"@{stack.root}\0".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and environ_marked(int(entry.name), mark):
            roots.add(int(entry.name))
    return tree(roots)


def environ_marked(pid: int, mark: bytes) -> bool:
    return environment_holds(pid, f"{MARK}=".encode()) and environment_holds(pid, mark)


def warehouse_started(stack) -> bool:
    """The warehouse's Spark session is up: its first Delta table is written."""
    return any((stack.root / "warehouse").glob("**/_delta_log/*.json"))


@pytest.mark.stack  # a stack of its own
@pytest.mark.timeout(600)
def test_every_listener_of_the_running_stack_is_on_loopback():
    """The stack with every app (Spark's driver JVM and its Python workers included): each
    listening socket of each of its processes, whatever process it is, binds to loopback."""
    with isolated_stack() as stack:
        stack.up(apps=stack.APPS, demo=True)
        wait_for(lambda: warehouse_started(stack), 300, "the warehouse's first Delta table")
        processes = stack_processes(stack)
        found = listeners(processes)
        commands = " ".join(listener.command for listener in found)
        assert "java" in commands and "postgres" in commands, found  # Spark's JVM is seen
        exposed = [str(listener) for listener in found if not listener.loopback]
        assert exposed == [], "listening beyond loopback:\n" + "\n".join(exposed)
