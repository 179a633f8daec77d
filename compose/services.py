"""The stack's long-running processes other than PostgreSQL: the broker, the search engine, the
registry, and the appliance's own apps that run on them (the capture, the views, the translator,
the demo load); each under a supervisor that restarts it when it fails."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from common.errors import BottlerError
from common.redact import redact
from compose import apicurio, supervise
from compose import search_engine as opensearch
from compose.kafka import KafkaNode, missing_jar
from compose.procs import MARK, PidFile, end_marked, port_answers, spawn, terminate, wait_until
from compose.supervise import State


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
    started (the processes carrying its :attr:`mark`). A ``supervised`` one runs under a
    supervisor (compose/supervise.py) that starts it again when it fails: the PID file then
    holds the supervisor's PID, and :meth:`supervision` says how the process itself fares."""

    name: str
    argv: list[str]
    marker: str  # part of the command line that identifies our process behind a PID
    ready: Callable[[], bool]
    pidfile: Path
    log: Path
    stack: Path  # the stack's directory
    start_timeout: float = 30.0
    env: dict[str, str] | None = None  # secrets go here, not in argv (which `ps` shows)
    supervised: bool = False
    # run before each start (not a supervisor's restart): prepares the service's files and
    # returns its command, which may depend on them (a JVM's classpath, say)
    prepare: Callable[[], list[str]] | None = None
    # run by `stack up` before it starts anything: refuses what would keep this service from
    # starting (no Java, say), so that a refused start leaves nothing running
    check: Callable[[], object] | None = None
    # given the log of a start that failed, the error that says why in one line, if it knows
    explain: Callable[[str], BottlerError | None] | None = None

    @property
    def state_file(self) -> Path:
        return self.pidfile.with_suffix(".state.json")

    def supervision(self) -> State | None:
        """How the supervised process fares (its PID, restarts, last failure) while its
        supervisor runs; None for a process without one."""
        if not self.supervised or self.running_pid() is None:
            return None
        return State.read(self.state_file)

    @property
    def mark(self) -> str:
        """The value of ``MARK`` in the environment of this service's processes."""
        return f"{self.name}@{self.stack}"

    def running_pid(self) -> int | None:
        return PidFile(self.pidfile, self.marker).running_pid()

    def start(self) -> None:
        argv = self.prepare() if self.prepare else self.argv
        if self.supervised:
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            self.state_file.unlink(missing_ok=True)  # a previous run's
            argv = supervise.command(self.name, argv, self.stack, self.state_file, self.log)
        logged = self.log.stat().st_size if self.log.exists() else 0  # what earlier runs said
        proc = spawn(argv, self.log, env={**os.environ, **(self.env or {}), MARK: self.mark})
        PidFile(self.pidfile, self.marker).write(proc.pid)

        def failed_at_start() -> str | None:
            """How the process ended, if it did before it was ready: a failure at start is
            one a restart will not mend (a wrong option, a port in use), so `up` says so."""
            if proc.poll() is not None:
                return supervise.describe(proc.returncode)
            state = State.read(self.state_file) if self.supervised else None
            return state.last_exit if state and state.restarts else None

        try:
            wait_until(lambda: failed_at_start() or self.ready(), self.start_timeout,
                       self.name, self.log)
        except BottlerError:  # not ready in time: nothing is left running
            # read before the stop, whose shutdown lines would bury why it was not ready
            failure = self._failure(f"did not become ready within {self.start_timeout:.0f}s",
                                    logged)
            self.stop()
            raise failure from None
        if ended := failed_at_start():
            self.stop()
            raise self._failure(f"exited at start ({ended})", logged)

    def _failure(self, what: str, logged: int) -> BottlerError:
        """The error of a start that failed, in one line: what its log says past ``logged``
        bytes (those of earlier runs), its last error, else its last warning (a process that
        hangs on something it waits for), else its last lines."""
        with open(self.log, "rb") as log:
            log.seek(logged)
            text = log.read().decode(errors="replace")
        if self.explain and (known := self.explain(text)):
            return known
        said = (supervise.last_error_line(self.log, logged)
                or supervise.last_error_line(self.log, logged, supervise.WARNING_LINE)
                or redact(" / ".join(line for line in text.strip().splitlines()[-3:]
                                     if not line.startswith(supervise.PREFIX)))[:300])
        # Kafka's timestamp says nothing here, nor OpenSearch's with its level and logger
        said = re.sub(r"^\[[^]]*\d\](\[\w+ *\]\[[\w.]+\])? ", "", said)
        return BottlerError(f"{self.name} {what}: {said}", f"see {self.log}")

    def stop(self) -> int:
        """Stop the process gracefully, then end what it left (a child it did not stop, one
        orphaned when it crashed): returns how many such processes were ended."""
        if (pid := self.running_pid()) is not None:
            terminate(pid)  # a supervisor passes the signals on, and restarts nothing after
        PidFile(self.pidfile, self.marker).clear()
        left = end_marked(self.mark)
        self.state_file.unlink(missing_ok=True)
        return left


def kafka_ready(port: int) -> Callable[[], bool]:
    """Ready once the node answers a metadata request with itself as a broker (its port opens
    a moment before it is unfenced)."""
    def check() -> bool:
        if not port_answers(port):
            return False
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0})
        try:
            return bool(admin.list_topics(timeout=2).brokers)
        except KafkaException:
            return False

    return check


def broker(root: Path, port: int, controller_port: int, cluster_id: str,
           settings: dict[str, str] | None = None) -> Service:
    """Apache Kafka: one KRaft node, broker and controller (compose/kafka.py), ``settings``
    added to its own."""
    node = KafkaNode(root, port, controller_port, cluster_id, settings)
    return Service(
        name="broker",
        argv=[],  # node.prepare() writes the settings, formats the storage, gives the command
        prepare=node.prepare,
        check=node.check,
        explain=missing_jar,
        marker="kafka.Kafka",
        ready=kafka_ready(port),
        pidfile=root / "run" / "broker.pid",
        log=root / "logs" / "broker.log",
        stack=root,
        start_timeout=90.0,  # a JVM on two busy cores
        supervised=True,
    )


def search_ready(port: int, name: str) -> Callable[[], bool]:
    """Ready once the node called ``name`` answers on ``port`` and has recovered its cluster
    state (its HTTP port answers a moment before: with 503s). Another node there (another
    stack's, which took the free port first) is not ready: this one then fails to bind it,
    and its start fails."""
    url = f"http://127.0.0.1:{port}"
    health = http_ok(f"{url}/_cluster/health?wait_for_status=yellow&timeout=1s")

    def check() -> bool:
        try:
            answer = httpx.get(url, timeout=1.0)
            return answer.status_code == 200 and answer.json().get("name") == name and health()
        except (httpx.HTTPError, ValueError):
            return False

    return check


def search_engine(root: Path, port: int, settings: dict[str, str] | None = None) -> Service:
    """The search API: one OpenSearch node (compose/search_engine.py), ``settings`` added to
    its own."""
    node = opensearch.SearchEngineNode(root, port, settings=settings)
    return Service(
        name="search-engine",
        argv=[],  # node.prepare() writes the settings, gives the command
        prepare=node.prepare,
        check=node.check,
        explain=opensearch.missing_jar,
        marker=opensearch.LAUNCHER,
        ready=search_ready(port, node.name),
        pidfile=root / "run" / "search-engine.pid",
        log=root / "logs" / "search-engine.log",
        stack=root,
        start_timeout=120.0,  # a JVM loading a search engine on two busy cores
        supervised=True,
    )


def registry(root: Path, port: int, kafka_port: int, kind: str = "bottler") -> Service:
    """The schema registry: ours (schemas/registry_server, its schemas in the broker), or
    Apicurio Registry (``kind`` apicurio: compose/apicurio.py)."""
    if kind == "apicurio":
        return apicurio_registry(root, port)
    return Service(
        name="registry",
        argv=[
            sys.executable, "-m", "schemas.registry_server", "--host", "127.0.0.1",
            "--port", str(port), "--kafka", f"127.0.0.1:{kafka_port}",
        ],
        marker="schemas.registry_server",
        ready=http_ok(f"http://127.0.0.1:{port}/subjects"),
        pidfile=root / "run" / "registry.pid",
        log=root / "logs" / "registry.log",
        stack=root,
        start_timeout=90.0,  # its broker waited for (up to 60 s), then its topic replayed
        supervised=True,
    )


def registry_url(port: int, kind: str = "bottler") -> str:
    """Where the stack's registry of ``kind`` answers Confluent's API."""
    root = f"http://127.0.0.1:{port}"
    return root + apicurio.CCOMPAT if kind == "apicurio" else root


def apicurio_registry(root: Path, port: int) -> Service:
    node = apicurio.ApicurioNode(root, port)
    return Service(
        name="registry",
        argv=[],  # node.prepare() finds Java 21 and the application, gives the command
        prepare=node.prepare,
        check=node.check,
        explain=apicurio.missing_jar,
        marker=apicurio.MARKER,
        ready=http_ok(f"{registry_url(port, 'apicurio')}/subjects"),
        pidfile=root / "run" / "registry.pid",
        log=root / "logs" / "registry.log",
        stack=root,
        start_timeout=120.0,  # a Quarkus application on two busy cores
        supervised=True,
    )


def _app(root: Path, name: str, command: list[str], env: dict[str, str],
         metrics_port: int, instance: str | None = None) -> Service:
    """A `bottler` command run as a stack app: ready once its Prometheus endpoint answers;
    endpoints and secrets come through ``env``. ``instance``: one of several instances of a
    view sharing its consumer group, under this name (its process name and --instance-id)."""
    if instance is not None:
        name, command = instance, [*command, "--join-group", "--instance-id", instance]
    return Service(
        name=name,
        argv=[sys.executable, "-m", "bottler", *command, "--metrics-port", str(metrics_port)],
        marker="bottler " + " ".join(command),  # identifies the process behind a PID
        ready=http_ok(f"http://127.0.0.1:{metrics_port}/metrics"),
        pidfile=root / "run" / f"{name}.pid",
        log=root / "logs" / f"{name}.log",
        stack=root,
        env=env,
        supervised=True,
    )


def capture(root: Path, env: dict[str, str], metrics_port: int) -> Service:
    """The capture of the stack's database into its broker (slot `bottler`)."""
    return _app(root, "capture", ["capture", "--slot", "bottler"], env, metrics_port)


def replica(root: Path, env: dict[str, str], metrics_port: int,
            instance: str | None = None) -> Service:
    """The target-Postgres replica of the captured topics (database `replica` of the stack)."""
    return _app(root, "replica", ["materialize", "postgres"], env, metrics_port, instance)


def search(root: Path, env: dict[str, str], metrics_port: int,
           instance: str | None = None) -> Service:
    """The live search index of the demo shop's products and orders (alias ``shop``)."""
    return _app(root, "search", ["materialize", "search", "--index", "shop", "--topic",
                                 "products", "--topic", "orders"], env, metrics_port, instance)


def warehouse(root: Path, env: dict[str, str], metrics_port: int) -> Service:
    """The Delta Lake warehouse of the captured topics, under ``<root>/warehouse``."""
    return _app(root, "warehouse", ["materialize", "warehouse", "--path", str(root / "warehouse")],
                env, metrics_port)


def translator(root: Path, env: dict[str, str], metrics_port: int,
               instance: str | None = None) -> Service:
    """The demo shop's orders as business events (topic ``order-events``)."""
    return _app(root, "translator", ["translate", "orders"], env, metrics_port, instance)


def load(root: Path, env: dict[str, str], metrics_port: int) -> Service:
    """A gentle write load on the demo shop (`bottler demo load`), so every view moves."""
    return _app(root, "load", ["demo", "load", "--rate", "5"], env, metrics_port)
