"""Where the figures come from (a stack directory, or endpoints given by hand), and taking one
snapshot of them all."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bottler.status.figures import App, Snapshot, Unavailable
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
        pids = stack.status()
        return {app: f"not running (log: {stack.part(app).log})"
                for app in stack.apps if pids.get(app) is None}

    return Target(f"stack {stack.root}", stack.endpoints.pg_dsn, stack.endpoints.kafka,
                  stack.metrics_urls(), stopped)


class Watcher:
    """Keeps its connections between snapshots (the live view takes one every few seconds)."""

    def __init__(self, target: Target, timeout: float = 3.0):
        self.target = target
        self.timeout = timeout
        self.slots = SlotReader(target.postgres, timeout) if target.postgres else None
        self.topics = TopicReader(target.broker, timeout) if target.broker else None
        self.groups = GroupReader(target.broker, timeout) if target.broker else None

    def snapshot(self) -> Snapshot:
        snap = Snapshot(redact(self.target.title))
        if self.slots is not None:
            try:
                snap.slots = self.slots.read()
            except Unavailable as exc:
                snap.slots_error = str(exc)
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
        for name, url in self.target.apps.items():
            if name in stopped:  # not asked: another process may hold its port
                snap.apps.append(App(name, url, error=stopped[name]))
            else:
                snap.apps.append(scrape(name, url, self.timeout))
        return snap

    def close(self) -> None:
        if self.slots is not None:
            self.slots.close()
