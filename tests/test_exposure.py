"""Least exposure (issue 13, item 5; issue 25, harm 4): every listener of the embedded stack,
Spark's driver included, on loopback unless the user asks otherwise; metrics served on loopback
unless --metrics-host says otherwise, and a DSN password on the command line (visible in `ps`)
draws one warning line naming the safer places. Through the real command line, against the
session's stack (every listener of a stack running every app: tests/test_appliance.py)."""

from __future__ import annotations

import socket
import subprocess
import sys

import httpx
import pytest
from psycopg.conninfo import conninfo_to_dict

from compose.procs import free_port
from tests.support.cli import ROOT, bottler, clean_env
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
