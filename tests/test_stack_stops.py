"""Stopped at any moment, nothing is left: `bottler stack down` at several moments of `make up`'s
start (the warehouse's Spark start included), and the warehouse stopped or killed while Spark
starts (issue 13). Leftovers are found by watching /proc while the test runs: every process
whose command line or environment names the stack's directory, and every descendant of one,
is remembered (with its start time, so a reused PID is not taken for it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from compose.procs import free_port, pid_alive
from compose.stack import Stack, free_ports, new_stack_dir
from tests.support.own_stack import Tracker
from tests.support.waiting import wait_for


def spark_jvm(cmd: str) -> bool:
    """The driver's JVM (not the launcher java, nor the shell scripts that run it)."""
    argv0, _, rest = cmd.partition(" ")
    return argv0.endswith("/java") and "org.apache.spark.deploy.SparkSubmit" in rest


# -- make up's stack, stopped at moments of its start --------------------------------------

@pytest.fixture(scope="module")
def stack_dir():
    """One stack directory and its ports for the module: PostgreSQL is initialised once."""
    base = new_stack_dir()
    yield base / "stack", free_ports()
    Stack(base / "stack").down()
    shutil.rmtree(base, ignore_errors=True)


def pid_file(root: Path, name: str) -> bool:
    return (root / "run" / f"{name}.pid").exists()


MOMENTS = {
    # the services: the broker is up, the registry starting
    "registry starting": lambda root, tracker, up: pid_file(root, "registry"),
    # the apps: the capture starting its snapshot of the demo shop
    "capture starting": lambda root, tracker, up: pid_file(root, "capture"),
    # the warehouse's Spark start: its JVM exists, `up` is still starting the other apps
    "spark starting": lambda root, tracker, up: any(map(spark_jvm, tracker.commands())),
}
# `down` of a stack whose `up` is done: tests/test_appliance.py


@pytest.mark.timeout(400)
@pytest.mark.parametrize("moment", MOMENTS)
def test_down_at_a_moment_of_up_leaves_no_process(stack_dir, moment):
    root, ports = stack_dir
    argv = [sys.executable, "-m", "bottler", "stack", "up", "--dir", str(root), "--demo", "--all"]
    for name, port in ports.items():
        argv += [f"--{name.replace('_', '-')}-port", str(port)]
    with Tracker(root) as tracker:
        up = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            wait_for(lambda: MOMENTS[moment](root, tracker, up), 240, moment)
            outcome = Stack(root).down()
            said = up.communicate(timeout=30)[0]  # interrupted by `down` if still starting
        finally:
            if up.poll() is None:
                up.kill()
                up.wait()
        assert tracker.alive() == [], (outcome, said)
    if moment == "spark starting":  # `down` reached the warehouse before Spark was up
        assert "stopped during Spark's start" in (root / "logs" / "warehouse.log").read_text()
    assert outcome.get("stack up") == "interrupted", (outcome, said)


# -- the warehouse alone, during Spark's start ---------------------------------------------

def start_warehouse(stack, tmp_path: Path) -> subprocess.Popen:
    """`bottler materialize warehouse` on the session's broker and registry (it checks that
    they answer before Spark starts), under a prefix of its own: all these tests need is
    Spark's start."""
    with open(tmp_path / "warehouse.log", "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "bottler", "materialize", "warehouse", "--path",
             str(tmp_path / "warehouse"), "--broker", stack.kafka, "--schema-registry",
             stack.registry_url, "--topic-prefix", f"t{uuid.uuid4().hex[:8]}",
             "--metrics-port", str(free_port())],
            stdout=log, stderr=subprocess.STDOUT)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_warehouse_stopped_while_spark_starts_exits_at_once_and_leaves_no_jvm(stack, tmp_path,
                                                                                sig):
    with Tracker(tmp_path, interval=0.05) as tracker:
        warehouse = start_warehouse(stack, tmp_path)
        try:
            wait_for(lambda: any(map(spark_jvm, tracker.commands())), 120, "Spark's JVM")
            os.kill(warehouse.pid, sig)
            stopped = time.monotonic()
            warehouse.wait(10)
            took = time.monotonic() - stopped
        finally:
            with contextlib.suppress(ProcessLookupError):
                warehouse.kill()
        assert tracker.alive() == []  # the warehouse waited for its JVM
    log = (tmp_path / "warehouse.log").read_text()
    assert warehouse.returncode == 0, log
    assert "stopped during Spark's start" in log
    assert "Traceback" not in log
    assert took < 10


def test_a_warehouse_killed_while_spark_starts_leaves_no_process(stack, tmp_path):
    with Tracker(tmp_path, interval=0.05) as tracker:
        warehouse = start_warehouse(stack, tmp_path)
        # the earliest moment: the shell script that launches Spark
        wait_for(lambda: len(tracker.commands()) > 1, 120, "Spark's launch")
        warehouse.kill()
        warehouse.wait()
        killed = time.monotonic()
        # the kernel ends the JVM with its parent (PR_SET_PDEATHSIG): well within a second
        wait_for(lambda: not tracker.alive(), 5, "the warehouse's children to end")
        assert time.monotonic() - killed < 1.5, tracker.alive()
        assert len(tracker.commands()) > 1  # Spark's launch was seen, and is gone


# -- what a service leaves behind ------------------------------------------------------------

@pytest.mark.parametrize("leader", ["running", "crashed"])
def test_stop_ends_what_a_service_left_behind(tmp_path, leader):
    """A process that starts a child in a session of its own (out of its process group) and is
    then stopped, or killed first: `stop` ends the orphan too, by the mark it inherited."""
    from compose.services import Service

    child = tmp_path / "child.pid"
    program = ("import subprocess, sys, time; "
               "p = subprocess.Popen(['sleep', '600'], start_new_session=True); "
               f"open({str(child)!r}, 'w').write(str(p.pid)); time.sleep(600)")
    service = Service(name="orphaner", argv=[sys.executable, "-c", program], marker="orphaner",
                      ready=child.exists, pidfile=tmp_path / "run" / "orphaner.pid",
                      log=tmp_path / "orphaner.log", stack=tmp_path)
    service.argv.append("orphaner")  # the marker, in the command line
    with Tracker(tmp_path, interval=0.05) as tracker:
        service.start()
        orphan = int(child.read_text())
        wait_for(lambda: len(tracker.commands()) >= 2, 10, "the service and its child")
        if leader == "crashed":
            os.kill(service.running_pid(), signal.SIGKILL)
            wait_for(lambda: service.running_pid() is None, 10, "the leader's death")
        assert service.stop() == 1
        assert tracker.alive() == []
    assert not pid_alive(orphan)
