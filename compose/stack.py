"""The embedded stack: PostgreSQL, Apache Kafka, OpenSearch and the schema registry server as
local processes, with data, logs and PID files under one directory (``.stack/`` by default)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from common.errors import BottlerError
from compose import apicurio, services
from compose.demo import seed
from compose.kafka import new_cluster_id
from compose.postgres import PostgresCluster
from compose.procs import PidFile, free_port, port_is_free, terminate
from compose.supervise import State, hold_file

SOURCE_DB = "shop"
REPLICA_DB = "replica"  # the target-Postgres replica's database (make up)


@dataclass(frozen=True)
class Ports:
    postgres: int = 15432
    kafka: int = 19092
    kafka_controller: int = 19093  # the KRaft controller's listener
    registry: int = 18081
    search: int = 19200
    metrics: int = 19100  # the capture's Prometheus endpoint
    replica_metrics: int = 19101  # the replica's
    search_metrics: int = 19102  # the search index's
    warehouse_metrics: int = 19103  # the warehouse loader's
    translator_metrics: int = 19104  # the business-event translator's
    load_metrics: int = 19105  # the demo write load's


@dataclass(frozen=True)
class Endpoints:
    pg_dsn: str
    kafka: str
    registry: str
    search: str

    def env(self) -> dict[str, str]:
        return {
            "BOTTLER_PG_DSN": self.pg_dsn,
            "BOTTLER_KAFKA": self.kafka,
            "BOTTLER_REGISTRY": self.registry,
            "BOTTLER_SEARCH": self.search,
        }


class Stack:
    """Start order is postgres, the broker (Kafka), the search engine, the registry (it keeps its
    schemas in the broker), then the appliance's processes that were asked for (`apps`), which
    the stack remembers."""

    ORDER = ("postgres", "broker", "search-engine", "registry")
    APPS = ("capture", "replica", "search", "warehouse", "translator", "load")
    # views that run as several instances in one consumer group (`up --instances replica=2`):
    # processes replica, replica-2, …, each with --join-group --instance-id <its name>
    SCALABLE = ("replica", "search", "translator")

    def __init__(self, root: Path, ports: dict[str, int | None] | None = None,
                 pg_version: str | None = None, broker_settings: dict[str, str] | None = None,
                 throwaway_ports: bool = False):
        """``ports`` overrides some of the ports the stack last used (or the defaults);
        ``pg_version`` the PostgreSQL major it was made with (default: the first found);
        ``broker_settings`` are added to the broker's (compose/kafka.py), for this object's
        starts only; ``throwaway_ports``: the ports are any free ones (isolated_stack's), so
        an app's metrics port taken meanwhile is replaced, not refused."""
        self.root = root.resolve()
        self.throwaway_ports = throwaway_ports
        self.broker_settings = broker_settings or {}
        self.state_file = self.root / "stack.json"
        self.env_file = self.root / "env"
        state = self._load_state()
        self.password = state.get("pg_password") or secrets.token_urlsafe(18)
        self.cluster_id = state.get("kafka_cluster_id") or new_cluster_id()
        self.pg_version: str | None = pg_version or state.get("pg_version")
        self.registry_kind = apicurio.chosen(state.get("registry", "bottler") if state else None)
        if state and self.registry_kind != state.get("registry", "bottler"):
            raise BottlerError(  # the topics carry the ids of the registry it was made with
                f"the stack in {self.root} was made with the {state.get('registry', 'bottler')} "
                f"schema registry, not {self.registry_kind}", f"unset {apicurio.REGISTRY_ENV}, "
                "or run `bottler stack reset` to start afresh (this deletes the stack's data)")
        self.apps: list[str] = state.get("apps", [])
        self.instances: dict[str, int] = state.get("instances", {})  # app -> count, if not 1
        self.instance_ports: dict[str, int] = state.get("instance_ports", {})  # their metrics
        saved = Ports(**state["ports"]) if "ports" in state else Ports()
        self.ports = replace(saved, **{k: v for k, v in (ports or {}).items() if v})
        if self.ports != saved and state and self.running():
            raise BottlerError(
                f"the stack in {self.root} is running on other ports ({_fmt(saved)})",
                "run `bottler stack down` first to change its ports",
            )

    # -- the parts -------------------------------------------------------------------------
    @property
    def postgres(self) -> PostgresCluster:
        return PostgresCluster(self.root, self.ports.postgres, self.password, self.pg_version)

    @property
    def broker(self) -> services.Service:
        return services.broker(self.root, self.ports.kafka, self.ports.kafka_controller,
                               self.cluster_id, self.broker_settings)

    @property
    def search_engine(self) -> services.Service:
        return services.search_engine(self.root, self.ports.search)

    @property
    def registry(self) -> services.Service:
        return services.registry(self.root, self.ports.registry, self.ports.kafka,
                                 self.registry_kind)

    def metrics_port(self, app: str) -> int:
        """The Prometheus port of an app (the capture's is ``ports.metrics``), or of an app's
        second, third… instance (a free port, remembered)."""
        if app in self.instance_ports:
            return self.instance_ports[app]
        return self.ports.metrics if app == "capture" else getattr(self.ports, f"{app}_metrics")

    def metrics_urls(self) -> dict[str, str]:
        """``process -> its Prometheus endpoint`` for the processes the stack runs, in start
        order."""
        return {name: f"http://127.0.0.1:{self.metrics_port(name)}/metrics"
                for name in self.processes()}

    def processes(self, apps: list[str] | tuple[str, ...] | None = None) -> list[str]:
        """The processes of ``apps`` (default: the stack's), in start order: an app, then its
        other instances."""
        return [name for app in (self.apps if apps is None else apps)
                for name in [app, *(f"{app}-{i}"
                                    for i in range(2, self.instances.get(app, 1) + 1))]]

    def _instance_of(self, name: str) -> tuple[str, int] | None:
        """(app, instance number) of a process name such as ``replica-2``; None otherwise."""
        app, _, number = name.rpartition("-")
        return (app, int(number)) if app in self.SCALABLE and number.isdigit() else None

    def views(self) -> list[tuple[str, str]]:
        """What the running apps build, and where to look at it."""
        out = []
        if "replica" in self.apps:
            out.append(("replica (target Postgres)", self.postgres.dsn(REPLICA_DB)))
        if "search" in self.apps:
            out.append(("search index (alias shop)", f"{self.endpoints.search}/shop/_search"))
        if "warehouse" in self.apps:
            out.append(("warehouse (Delta tables)", str(self.root / "warehouse")))
        if "translator" in self.apps:
            out.append(("business events (read_committed)", "topic order-events"))
        if self.apps:
            out.append(("live status", f"bottler status --dir {self.root}"))
        return out

    def part(self, name: str):
        if name in self.APPS or self._instance_of(name):
            return self._app(name)
        if name not in self.ORDER:
            choices = ", ".join(self.ORDER + self.APPS)
            raise BottlerError(f"unknown service {name!r}", f"choose one of {choices}")
        return getattr(self, name.replace("-", "_"))

    def _app(self, name: str) -> services.Service:
        """An appliance process, built by its namesake in ``services`` with the stack's
        endpoints (the replica also gets its target database) and its metrics port; an
        instance of an app that runs several joins the app's consumer group under its name."""
        app = (self._instance_of(name) or (name,))[0]
        env = self.endpoints.env()
        if app == "replica":
            env["BOTTLER_TARGET_DSN"] = self.postgres.dsn(REPLICA_DB)
        if app == "capture" and self.instances:  # partitions to share (new topics only)
            env["BOTTLER_PARTITIONS"] = str(max(self.instances.values()))
        build = getattr(services, app)
        if app in self.SCALABLE and (name != app or self.instances.get(app, 1) > 1):
            return build(self.root, env, self.metrics_port(name), instance=name)
        return build(self.root, env, self.metrics_port(name))

    @property
    def endpoints(self) -> Endpoints:
        return Endpoints(
            pg_dsn=self.postgres.dsn(SOURCE_DB),
            kafka=f"127.0.0.1:{self.ports.kafka}",
            registry=services.registry_url(self.ports.registry, self.registry_kind),
            search=f"http://127.0.0.1:{self.ports.search}",
        )

    # -- lifecycle -------------------------------------------------------------------------
    def status(self) -> dict[str, int | None]:
        """PID of each running service (and enabled app), None for a stopped one."""
        names = self.ORDER + tuple(self.processes())
        if not self.root.exists():
            return dict.fromkeys(names)
        return {name: self.part(name).running_pid() for name in names}

    def supervision(self) -> dict[str, State]:
        """How each running process fares under its supervisor: its own PID, its restarts and
        its last failure."""
        names = self.ORDER + tuple(self.processes())
        found = {n: self.part(n).supervision() for n in names if n != "postgres"}
        return {name: state for name, state in found.items() if state is not None}

    def running(self) -> bool:
        return any(pid is not None for pid in self.status().values())

    @property
    def _starter(self) -> PidFile:
        """The `bottler stack up` under way, so that `down` can interrupt it."""
        return PidFile(self.root / "run" / "up.pid", "stack up")

    def up(self, apps: tuple[str, ...] = (), demo: bool = False,
           instances: dict[str, int] | None = None) -> dict[str, str]:
        """Start whatever is not running: the services, then (seeding the demo shop first if
        asked) the apps asked for now and those enabled before, each with the number of
        ``instances`` asked for now or before (default 1). Says what happened to each."""
        unknown = set(apps) - set(self.APPS)
        if unknown:
            raise BottlerError(f"unknown app {', '.join(sorted(unknown))}",
                               f"choose among {', '.join(self.APPS)}")
        self._set_instances(instances or {})
        self.postgres.check()  # running or not: a cluster of another major is refused
        self.apps = [a for a in self.APPS if a in apps or a in self.apps]
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # the postgres system user must traverse it when we are root
        self._save_state()
        self._starter.write(os.getpid())
        started: list[str] = []
        try:
            self._check(self.ORDER + tuple(self.processes()))
            outcome = self._start(self.ORDER, started)
            self._write_env()
            if demo:  # before the apps, so the capture's snapshot has the shop
                seed(self.endpoints.pg_dsn)
            return outcome | self._start(tuple(self.processes()), started)
        except BottlerError:  # a failed start undoes what it started
            for name in reversed(started):
                self.part(name).stop()
            raise
        finally:
            self._starter.clear()

    def _set_instances(self, wanted: dict[str, int]) -> None:
        """Take the instance counts asked for; a running app keeps the count it runs with."""
        for app, count in wanted.items():
            if app not in self.SCALABLE or count < 1:
                raise BottlerError(f"cannot run {app} as {count} instance(s)",
                                   f"give VIEW=N with N >= 1 for one of "
                                   f"{', '.join(self.SCALABLE)}")
            had = self.instances.get(app, 1)
            if count != had and self.root.exists() and any(
                    self.part(n).running_pid() for n in self.processes([app])):
                raise BottlerError(
                    f"{app} is running as {had} instance(s)",
                    f"stop the stack first (`bottler stack down`), then `bottler stack up "
                    f"--instances {app}={count}`")
            if count == 1:
                self.instances.pop(app, None)
            else:
                self.instances[app] = count
        for name in self.processes(self.SCALABLE):
            if name not in self.SCALABLE and name not in self.instance_ports:
                self.instance_ports[name] = free_port()

    def _check(self, names: tuple[str, ...]) -> None:
        """Refuse, before anything starts, what would keep a part that is not running from
        starting: a port in use, no Java for the broker, a data directory not its own."""
        for name in names:
            part = self.part(name)
            if part.running_pid() is None:
                self._check_port(name)
                if check := getattr(part, "check", None):
                    check()

    def _start(self, names: tuple[str, ...], started: list[str]) -> dict[str, str]:
        """Start those of ``names`` not running, adding each to ``started``."""
        outcome = {}
        for name in names:
            if self.part(name).running_pid() is not None:
                outcome[name] = "already running"
                continue
            self._check_port(name)
            started.append(name)
            if name == "postgres":
                pg = self.postgres
                if not pg.initialized():
                    pg.init()
                pg.start(databases=(SOURCE_DB, REPLICA_DB))
            else:
                self.part(name).start()
            outcome[name] = "started"
        return outcome

    def down(self) -> dict[str, str]:
        """Stop everything, at any moment: a `stack up` still starting things (in another
        process) first, then each part with whatever it left behind. Meanwhile no supervisor
        restarts anything (the hold file), so nothing starts behind our back."""
        hold = PidFile(hold_file(self.root), "")
        if self.root.exists():  # else nothing of ours can read it: `down` creates no directory
            hold.write(os.getpid())
        try:
            return self._down()
        finally:
            hold.clear()

    def _down(self) -> dict[str, str]:
        outcome = {}
        if (starter := self._starter.running_pid()) not in (None, os.getpid()):
            terminate(starter)
            self._starter.clear()
            outcome["stack up"] = "interrupted"
        for name in reversed(self.ORDER + tuple(self._every_process())):
            part = self.part(name)
            was_running = part.running_pid() is not None
            left = part.stop()
            outcome[name] = "stopped" if was_running else "not running"
            if left:
                outcome[name] += f" ({left} leftover process{'es' if left > 1 else ''} ended)"
        return outcome

    def _every_process(self) -> list[str]:
        """Every app's processes: its instances now and those a PID file remains of."""
        run = self.root / "run"
        left = {p.stem for p in run.glob("*-*.pid")} if run.exists() else set()
        names = []
        for app in self.APPS:
            names += self.processes([app])
            names += sorted((n for n in left if (self._instance_of(n) or ("",))[0] == app
                             and n not in names), key=lambda n: self._instance_of(n)[1])
        return names

    def restart(self, name: str) -> None:
        part = self.part(name)
        part.stop()
        part.start()

    def reset(self) -> None:
        """Stop everything and delete all data, logs and state."""
        if self.root.exists():
            self.down()
            shutil.rmtree(self.root)

    # -- state -----------------------------------------------------------------------------
    def _check_port(self, name: str) -> None:
        if name in self.instance_ports:
            if not port_is_free(port := self.instance_ports[name]):
                self.instance_ports[name] = free_port()  # chosen by us: another will do
                self._save_state()
            return
        port_name = {"broker": ("kafka", "kafka_controller"), "search-engine": ("search",),
                     "capture": ("metrics",)}.get(
            name, (f"{name}_metrics",) if name in self.APPS else (name,))
        for pn in port_name:
            port = getattr(self.ports, pn)
            if port_is_free(port):
                continue
            if self.throwaway_ports and pn.endswith("metrics"):
                # Found free when the stack was made, taken since (another process's connection
                # on a busy machine): only its app refers to it, so another will do. The
                # others are in the running parts' settings (the broker's in the registry's).
                self.ports = replace(self.ports, **{pn: free_port()})
                self._save_state()
            else:
                raise BottlerError(
                    f"port {port} ({pn}) is already in use on 127.0.0.1",
                    f"stop what holds it, or choose another with --{pn.replace('_', '-')}-port "
                    f"(or BOTTLER_STACK_{pn.upper()}_PORT)",
                )

    def _load_state(self) -> dict:
        if not self.state_file.exists():
            return {}
        try:
            state = json.loads(self.state_file.read_text())
            if "ports" in state:
                Ports(**state["ports"])
            return state
        except (ValueError, TypeError) as exc:
            raise BottlerError(
                f"{self.state_file} is unreadable ({exc})",
                "run `bottler stack reset` to start afresh (this deletes the stack's data)",
            ) from None

    def _save_state(self) -> None:
        state = {"ports": asdict(self.ports), "pg_password": self.password,
                 "kafka_cluster_id": self.cluster_id, "apps": self.apps,
                 "pg_version": self.pg_version, "registry": self.registry_kind,
                 "instances": self.instances, "instance_ports": self.instance_ports}
        self.state_file.write_text(json.dumps(state, indent=2) + "\n")
        self.state_file.chmod(0o600)  # holds the database password

    def _write_env(self) -> None:
        lines = ["# bottler embedded stack: `. .stack/env` to use these endpoints"]
        lines += [f"export {k}='{v}'" for k, v in self.endpoints.env().items()]
        self.env_file.write_text("\n".join(lines) + "\n")
        self.env_file.chmod(0o600)


def _fmt(ports: Ports) -> str:
    return ", ".join(f"{f.name} {getattr(ports, f.name)}" for f in fields(ports))


def new_stack_dir() -> Path:
    """A fresh temporary directory the postgres system user can traverse (mkdtemp gives 0700)."""
    root = Path(tempfile.mkdtemp(prefix="bottler-"))
    root.chmod(0o755)
    return root


def free_ports() -> dict[str, int]:
    return {name: free_port() for name in Ports.__dataclass_fields__}


@contextmanager
def isolated_stack(pg_version: str | None = None,
                   broker_settings: dict[str, str] | None = None) -> Iterator[Stack]:
    """A throwaway stack on free ports in a temporary directory, removed afterwards: it never
    collides with a running `make up` (tests and benchmarks use it)."""
    base = new_stack_dir()
    stack = Stack(base / "stack", free_ports(), pg_version, broker_settings,
                  throwaway_ports=True)
    try:
        stack.up()
        yield stack
    finally:
        stack.down()
        shutil.rmtree(base, ignore_errors=True)
