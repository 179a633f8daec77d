"""The stack's long-running processes other than PostgreSQL: the broker, the registry, and the
appliance's own processes (capture) that run on them."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from common import extras
from common.errors import BottlerError
from compose.procs import MARK, PidFile, end_marked, port_answers, spawn, terminate, wait_until


def http_ok(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(url, timeout=1.0).status_code == 200
        except httpx.HTTPError:
            return False

    return check


@dataclass
class Service:
    """A process we start detached, track by PID file and stop gracefully, with whatever it
    started (the processes carrying its :attr:`mark`)."""

    name: str
    argv: list[str]
    marker: str  # part of the command line that identifies our process behind a PID
    ready: Callable[[], bool]
    pidfile: Path
    log: Path
    stack: Path  # the stack's directory
    start_timeout: float = 30.0
    env: dict[str, str] | None = None  # secrets go here, not in argv (which `ps` shows)

    @property
    def mark(self) -> str:
        """The value of ``MARK`` in the environment of this service's processes."""
        return f"{self.name}@{self.stack}"

    def running_pid(self) -> int | None:
        return PidFile(self.pidfile, self.marker).running_pid()

    def start(self) -> None:
        proc = spawn(self.argv, self.log, env={**os.environ, **(self.env or {}), MARK: self.mark})
        PidFile(self.pidfile, self.marker).write(proc.pid)

        def ready_or_dead() -> bool:
            if proc.poll() is not None:
                return True
            return self.ready()

        wait_until(ready_or_dead, self.start_timeout, self.name, self.log)
        if proc.poll() is not None:
            PidFile(self.pidfile, self.marker).clear()
            tail = self.log.read_text(errors="replace").strip().splitlines()[-3:]
            raise BottlerError(
                f"{self.name} exited at start (code {proc.returncode}): " + " / ".join(tail),
                f"see {self.log}",
            )

    def stop(self) -> int:
        """Stop the process gracefully, then end what it left (a child it did not stop, one
        orphaned when it crashed): returns how many such processes were ended."""
        if (pid := self.running_pid()) is not None:
            terminate(pid)
        PidFile(self.pidfile, self.marker).clear()
        return end_marked(self.mark)


def noida_binary() -> Path:
    """noida-db ships its server as a binary inside the Python package (the stack extra)."""
    extras.require("stack")
    import noida_db

    return Path(noida_db.__file__).parent / "noida-db"


def broker(root: Path, kafka_port: int, search_port: int) -> Service:
    """One noida-db process serving the Kafka API and the Elasticsearch API."""
    return Service(
        name="broker",
        argv=[
            str(noida_binary()), "start", "--only", "kafka,elasticsearch",
            "--host", "127.0.0.1",
            "--kafka-port", str(kafka_port), "--elasticsearch-port", str(search_port),
            "--data-dir", str(root / "broker"),
        ],
        marker="noida-db",
        ready=lambda: port_answers(kafka_port) and http_ok(f"http://127.0.0.1:{search_port}/")(),
        pidfile=root / "run" / "broker.pid",
        log=root / "logs" / "broker.log",
        stack=root,
    )


def registry(root: Path, port: int, kafka_port: int) -> Service:
    return Service(
        name="registry",
        argv=[
            sys.executable, "-m", "schemas.registry", "--host", "127.0.0.1",
            "--port", str(port), "--kafka", f"127.0.0.1:{kafka_port}",
        ],
        marker="schemas.registry",
        ready=http_ok(f"http://127.0.0.1:{port}/subjects"),
        pidfile=root / "run" / "registry.pid",
        log=root / "logs" / "registry.log",
        stack=root,
        start_timeout=60.0,
    )


def _app(root: Path, name: str, command: list[str], env: dict[str, str],
         metrics_port: int) -> Service:
    """A `bottler` command run as a stack app: ready once its Prometheus endpoint answers;
    endpoints and secrets come through ``env``."""
    return Service(
        name=name,
        argv=[sys.executable, "-m", "bottler", *command, "--metrics-port", str(metrics_port)],
        marker="bottler " + " ".join(command),  # identifies the process behind a PID
        ready=http_ok(f"http://127.0.0.1:{metrics_port}/metrics"),
        pidfile=root / "run" / f"{name}.pid",
        log=root / "logs" / f"{name}.log",
        stack=root,
        env=env,
    )


def capture(root: Path, env: dict[str, str], metrics_port: int) -> Service:
    """The capture of the stack's database into its broker (slot `bottler`)."""
    # noida-db acknowledges before it saves: positions wait 5 s before they are confirmed
    return _app(root, "capture", ["capture", "--slot", "bottler", "--confirm-delay", "5"], env,
                metrics_port)


def replica(root: Path, env: dict[str, str], metrics_port: int) -> Service:
    """The target-Postgres replica of the captured topics (database `replica` of the stack)."""
    return _app(root, "replica", ["materialize", "postgres"], env, metrics_port)


def search(root: Path, env: dict[str, str], metrics_port: int) -> Service:
    """The live search index of the demo shop's products and orders (alias ``shop``)."""
    return _app(root, "search", ["materialize", "search", "--index", "shop", "--topic",
                                 "products", "--topic", "orders"], env, metrics_port)


def warehouse(root: Path, env: dict[str, str], metrics_port: int) -> Service:
    """The Delta Lake warehouse of the captured topics, under ``<root>/warehouse``."""
    return _app(root, "warehouse", ["materialize", "warehouse", "--path", str(root / "warehouse")],
                env, metrics_port)


def translator(root: Path, env: dict[str, str], metrics_port: int) -> Service:
    """The demo shop's orders as business events (topic ``order-events``)."""
    return _app(root, "translator", ["translate", "orders"], env, metrics_port)


def load(root: Path, env: dict[str, str], metrics_port: int) -> Service:
    """A gentle write load on the demo shop (`bottler demo load`), so every view moves."""
    return _app(root, "load", ["demo", "load", "--rate", "5"], env, metrics_port)
