"""The appliance under faults: an isolated embedded stack running every app (each restarted by
its own supervisor when it fails), a second supervisor that starts again an app whose whole
supervision ended (as systemd or Kubernetes would), and the faults themselves."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from common.errors import BottlerError
from compose.procs import pid_alive, port_is_free, wait_until
from compose.stack import Stack

log = logging.getLogger(__name__)


@dataclass
class Fault:
    at: float  # seconds into the load
    name: str
    seconds: float = 0.0  # how long the fault took, until the service was back


class Supervisor(threading.Thread):
    """Restarts any app of ``stack`` that is not running, every second, until stopped. An app
    that cannot start yet (its database restarting) is tried again on the next round."""

    def __init__(self, stack: Stack):
        super().__init__(daemon=True)
        self.stack = stack
        self.restarts: dict[str, int] = {}
        self.paused = threading.Lock()  # held during a fault of a service the apps need
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.stopped.set()
        self.join()

    def run(self) -> None:
        while not self.stopped.wait(1.0):
            with self.paused:
                for app in self.stack.apps:
                    self._revive(app)

    def _revive(self, app: str) -> None:
        part = self.stack.part(app)
        if part.running_pid() is not None:
            return
        try:
            part.start()
        except BottlerError as exc:
            log.warning("supervisor: %s did not start yet: %s", app, exc)
            return
        self.restarts[app] = self.restarts.get(app, 0) + 1


class Faults:
    """The faults the suite injects. Each returns once the service is back."""

    def __init__(self, stack: Stack, supervisor: Supervisor):
        self.stack = stack
        self.supervisor = supervisor

    def kill(self, app: str) -> Callable[[], None]:
        def kill_9() -> None:
            # the app's own process, not its supervisor (which would stop it gracefully)
            supervision = self.stack.part(app).supervision()
            pid = supervision.pid if supervision else None
            if pid is None:
                return  # already down: the supervisor is on it
            with contextlib.suppress(ProcessLookupError):  # it died meanwhile, on its own
                os.kill(pid, signal.SIGKILL)
            while pid_alive(pid):
                time.sleep(0.05)
        kill_9.__name__ = f"kill -9 {app}"
        return kill_9

    def restart_postgres(self) -> None:
        with self.supervisor.paused:  # apps crash meanwhile; revive them once it is back
            self.stack.postgres.stop()
            time.sleep(1.0)
            self.stack.postgres.start()

    def stop_broker(self, seconds: float = 5.0) -> Callable[[], None]:
        """Kafka stopped gracefully (its controlled shutdown) mid-stream, started again
        ``seconds`` later: every client meanwhile retries, or fails and is restarted."""
        def broker_down() -> None:
            with self.supervisor.paused:
                self.stack.broker.stop()
                ports = (self.stack.ports.kafka, self.stack.ports.kafka_controller)
                wait_until(lambda: all(port_is_free(p) for p in ports), 30, "the broker's ports")
                time.sleep(seconds)
                self.stack.broker.start()
        broker_down.__name__ = f"broker stopped {seconds:.0f} s"
        return broker_down

    def stop_registry(self, seconds: float = 5.0) -> Callable[[], None]:
        def registry_down() -> None:
            with self.supervisor.paused:
                self.stack.registry.stop()
                time.sleep(seconds)
                self.stack.registry.start()
        registry_down.__name__ = f"registry stopped {seconds:.0f} s"
        return registry_down

    def schedule(self, duration: float, rng: random.Random,
                 broker_kills: int = 2) -> list[tuple[float, Callable]]:
        """Every app killed twice, the broker killed ``broker_kills`` times (its supervisor
        restarts it) and stopped gracefully once, Postgres restarted, the registry stopped: in
        random order, spread over ``duration`` seconds, the first after a few seconds."""
        faults: list[Callable] = [self.kill(app) for app in self.stack.apps for _ in range(2)]
        faults += [self.kill("broker") for _ in range(broker_kills)]
        faults += [self.restart_postgres, self.stop_registry(), self.stop_broker()]
        rng.shuffle(faults)
        step = duration / (len(faults) + 1)
        return [(step * (i + 1) + rng.uniform(-step / 3, step / 3), f)
                for i, f in enumerate(faults)]


def inject(faults: list[tuple[float, Callable]], started: float,
           stop: threading.Event) -> list[Fault]:
    """Run each fault at its time (seconds after ``started``); the list of what was done."""
    done = []
    for at, fault in faults:
        if stop.wait(max(0.0, started + at - time.monotonic())):
            break
        began = time.monotonic()
        log.info("fault at %.1f s: %s", began - started, fault.__name__)
        fault()
        done.append(Fault(began - started, fault.__name__, time.monotonic() - began))
    return done
