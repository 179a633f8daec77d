"""A Spark standalone cluster of the test's own: a master and one worker (one core, a small
memory), started from pyspark's own ``bin/spark-class`` as processes of this test, on loopback
and free ports, and killed (their process groups) when it ends; and ``spark-submit`` against it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from common.children import die_with_parent
from compose.procs import free_port
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
WORKER_MEMORY = "1g"  # the worker's; its executor takes EXECUTOR_MEMORY of it
EXECUTOR_MEMORY = "512m"


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def environment() -> dict[str, str]:
    return os.environ | {
        "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_DAEMON_MEMORY": "256m",  # the master's and the worker's own JVMs
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",  # no fixed port 6066
        "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }


@dataclass
class Cluster:
    master: str  # spark://127.0.0.1:<port>
    logs: Path

    def worker_log(self) -> str:
        return (self.logs / "worker.log").read_text(errors="replace")

    def submit(self, application: Path, *args: str, jars: list[str]) -> subprocess.CompletedProcess:
        """``spark-submit --master <this cluster> --jars … application args``: its output."""
        command = [str(spark_home() / "bin" / "spark-submit"), "--master", self.master,
                   "--jars", ",".join(jars), "--conf", "spark.driver.host=127.0.0.1",
                   "--driver-memory", "1g", "--executor-memory", EXECUTOR_MEMORY,
                   "--total-executor-cores", "1", str(application), *args]
        # a bound on a hung run only: the job's progress is its own (the test reads the result)
        run = subprocess.run(command, env=environment(), capture_output=True, text=True,
                             timeout=540, preexec_fn=_dies_with(os.getpid()))
        (self.logs / "driver.log").write_text(run.stdout + run.stderr)  # for a failure's reader
        return run


def _dies_with(parent: int):
    return lambda: die_with_parent(parent)


def _start(cls: str, args: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen([str(spark_home() / "bin" / "spark-class"), cls, *args],
                                env=environment(), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_dies_with(os.getpid()))


def _end(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


@contextlib.contextmanager
def standalone(directory: Path) -> Iterator[Cluster]:
    """A master and one worker, up and registered, for the body of the ``with``."""
    directory.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cluster = Cluster(f"spark://127.0.0.1:{port}", directory)
    started: list[subprocess.Popen] = []
    try:
        started.append(_start("org.apache.spark.deploy.master.Master",
                              ["--host", "127.0.0.1", "--port", str(port), "--webui-port", "0"],
                              directory / "master.log"))
        wait_for(lambda: "ALIVE" in (directory / "master.log").read_text(errors="replace"),
                 120, "the Spark master's start")
        started.append(_start("org.apache.spark.deploy.worker.Worker",
                              ["--host", "127.0.0.1", "--webui-port", "0", "--cores", "1",
                               "--memory", WORKER_MEMORY, "--work-dir", str(directory / "work"),
                               cluster.master], directory / "worker.log"))
        wait_for(lambda: "registered with master" in cluster.worker_log(), 120,
                 "the Spark worker's registration")
        yield cluster
    finally:
        for proc in reversed(started):
            _end(proc)
