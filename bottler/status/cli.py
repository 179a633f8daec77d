"""`bottler status` (registered by bottler/cli.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

import typer
from pydantic import Field, field_validator
from rich.console import Console

from common.config import BROKER, KAFKA_CONFIG, KafkaSettings, env
from common.errors import BottlerError
from common.flags import Flag
from common.options import settings_command

if TYPE_CHECKING:  # imported by the command (every command imports this module)
    from bottler.status.watch import Target, Watcher


class StatusSettings(KafkaSettings):
    dir: Annotated[Path, Flag("--dir", help="The embedded stack to watch (what `make up` "
                              "started)")] = Field(Path(".stack"),
                                                   validation_alias=env("BOTTLER_STACK_DIR"))
    postgres: Annotated[str | None, Flag(
        "--postgres", "-d", help="Source database DSN, for a deployment other than the stack",
        shown="the stack's")] = Field(None, validation_alias=env("BOTTLER_PG_DSN"))
    kafka: Annotated[dict[str, str], BROKER.but(help="Kafka bootstrap servers, idem",
                                                shown="the stack's"),
                     KAFKA_CONFIG] = Field(default_factory=dict)
    metrics: Annotated[list[str], Flag(
        "--metrics", "-m", help="An app's Prometheus endpoint, as name=URL or URL (repeatable; "
        "space-separated in the variable)", shown="the stack's apps")] = []
    standby: Annotated[list[str], Flag(
        "--standby", help="A physical standby's DSN (repeatable): shows what it lacks to take "
        "over the capture's failover slots (PostgreSQL 17+)")] = []
    once: Annotated[bool, Flag("--once", help="Print one snapshot and exit (also when not on a "
                               "terminal); exits 1 when something is down.")] = False
    interval: Annotated[float, Flag(
        "--interval", help="Seconds between refreshes")] = Field(2.0, ge=0.2)

    @field_validator("metrics", mode="before")
    @classmethod
    def _metrics(cls, value):
        return value.split() if isinstance(value, str) else value  # BOTTLER_METRICS: spaces


@settings_command
def status(s: StatusSettings) -> None:
    """One live view of the replication slot, the topics and every process's lag and state."""
    from bottler.status.view import render
    from bottler.status.watch import Watcher, has_stack, stack_target

    # Endpoints on the command line are watched; from the environment or the file, when there
    # is no stack to watch.
    given = s.model_fields_set & {"postgres", "kafka", "metrics"}
    if s.flags & {"postgres", "broker", "metrics"} or (given and not has_stack(s.dir)):
        target = explicit_target(s)
    else:
        target = stack_target(s.dir)
    target.standbys = s.standby
    watcher = Watcher(target)
    try:
        if s.once or not sys.stdout.isatty():
            snap = watcher.snapshot()
            Console(width=160).print(render(snap))  # piped: wide enough for a table row
            if not snap.healthy:
                raise typer.Exit(1)
        else:
            live(watcher, s.interval)
    finally:
        watcher.close()


def live(watcher: Watcher, interval: float) -> None:
    from rich.live import Live

    from bottler.status.view import render

    try:
        with Live(render(watcher.snapshot()), auto_refresh=False) as view:
            while True:
                time.sleep(interval)
                view.update(render(watcher.snapshot()), refresh=True)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how the view ends


def explicit_target(s: StatusSettings) -> Target:
    """Endpoints given by hand (Docker, Kubernetes...)."""
    from bottler.status.watch import Target

    apps: dict[str, str] = {}
    for item in s.metrics:
        name, sep, url = item.partition("=")
        if not sep or "://" in name:  # the URL alone
            name, url = "", item
        if not urlsplit(url).scheme.startswith("http"):
            raise BottlerError(f"metrics endpoint {item!r} is not an http(s) URL",
                               "give name=http://host:port/metrics, or the URL alone")
        apps[name or urlsplit(url).netloc] = url
    broker = s.kafka if "kafka" in s.model_fields_set else None
    return Target("given endpoints", s.postgres, broker, apps)
