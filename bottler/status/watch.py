"""Where the figures come from (a stack directory, or endpoints given by hand), and taking one
snapshot of them all."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bottler.status.failover import problems
from bottler.status.figures import App, Restarts, Snapshot, Unavailable
from bottler.status.groups import GroupReader
from bottler.status.scrape import scrape
from bottler.status.slots import SlotReader
from bottler.status.topics import TopicReader
from common.errors import BottlerError
from common.redact import redact


@dataclass
class Target:
    title: str
    postgres: str | None
    broker: str | None
    apps: dict[str, str]  # app name -> its Prometheus endpoint
    # The stack knows which processes run: "app -> why it is down", for those that are not.
    stopped: Callable[[], dict[str, str]] = field(default=lambda: {})
    # And its supervisors, how often each one restarted its process, and why.
    restarts: Callable[[], dict[str, Restarts]] = field(default=lambda: {})
    standbys: list[str] = field(default_factory=list)  # DSNs: their failover readiness


def has_stack(root: Path) -> bool:
    return (root / "stack.json").exists()


def stack_target(root: Path) -> Target:
    """Everything the embedded stack in ``root`` runs (`bottler stack up --app ...`)."""
    from compose.stack import Stack

    if not has_stack(root):
        raise BottlerError(
            f"no stack in {root.resolve()}",
            "start one with `make up` (or `bottler stack up`), point --dir at it, or give "
            "--postgres, --broker and --metrics (or BOTTLER_PG_DSN, BOTTLER_KAFKA and "
            "BOTTLER_METRICS) for another deployment",
        )
    stack = Stack(root)

    def stopped() -> dict[str, str]:
        pids, supervision = stack.status(), stack.supervision()
        down = {}
        for app in stack.processes():
            log = stack.part(app).log
            if pids.get(app) is None:
                down[app] = f"not running (log: {log})"
            elif (s := supervision.get(app)) and s.state == "restarting":
                wait = max(0.0, (s.next_start or 0) - time.time())
                down[app] = f"failed, restart {s.restarts} in {wait:.0f} s (log: {log})"
        return down

    def restarts() -> dict[str, Restarts]:
        return {app: r for app, r in supervised(stack).items() if app in stack.processes()}

    return Target(f"stack {stack.root}", stack.endpoints.pg_dsn, stack.endpoints.kafka,
                  stack.metrics_urls(), stopped, restarts)


def supervised(stack) -> dict[str, Restarts]:
    """What the supervisors of a stack's running processes say of them."""
    return {name: Restarts(s.restarts, s.last_exit, s.last_error, s.failed_at)
            for name, s in stack.supervision().items()}


class Watcher:
    """Keeps its connections between snapshots (the live view takes one every few seconds)."""

    def __init__(self, target: Target, timeout: float = 3.0):
        self.target = target
        self.timeout = timeout
        self.slots = SlotReader(target.postgres, timeout) if target.postgres else None
        self.standbys = [SlotReader(dsn, timeout) for dsn in target.standbys]
        self.topics = TopicReader(target.broker, timeout) if target.broker else None
        self.groups = GroupReader(target.broker, timeout) if target.broker else None

    def snapshot(self) -> Snapshot:
        snap = Snapshot(redact(self.target.title))
        if self.slots is not None:
            try:
                snap.slots = self.slots.read()
            except Unavailable as exc:
                snap.slots_error = str(exc)
        snap.failover = problems(self.slots, self.standbys)
        if self.topics is not None:
            try:
                snap.topics = self.topics.read()
            except Unavailable as exc:
                snap.topics_error = str(exc)
        if self.groups is not None and snap.topics_error is None:
            try:
                snap.instances = self.groups.read()
            except Unavailable as exc:
                snap.instances_error = str(exc)
        stopped = self.target.stopped()
        restarts = self.target.restarts()
        for name, url in self.target.apps.items():
            if name in stopped:  # not asked: another process may hold its port
                app = App(name, url, error=stopped[name])
            else:
                app = scrape(name, url, self.timeout)
            app.restarts = restarts.get(name)
            snap.apps.append(app)
        return snap

    def close(self) -> None:
        for reader in [self.slots, *self.standbys]:
            if reader is not None:
                reader.close()
