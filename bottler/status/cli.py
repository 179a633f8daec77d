"""`bottler status` (registered by bottler/cli.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import typer
from rich.console import Console

from bottler.status.view import render
from bottler.status.watch import Target, Watcher, has_stack, stack_target
from common.errors import BottlerError

ENV = ("BOTTLER_PG_DSN", "BOTTLER_KAFKA", "BOTTLER_METRICS")  # the endpoints without a stack


def status(
    root: Path = typer.Option(Path(".stack"), "--dir", envvar="BOTTLER_STACK_DIR",
                              help="The embedded stack to watch (what `make up` started)."),
    postgres: str | None = typer.Option(
        None, "--postgres", "-d", show_default=False,
        help="Source database DSN, for a deployment other than the stack "
        "[default: $BOTTLER_PG_DSN]"),
    broker: str | None = typer.Option(
        None, "--broker", "-b", show_default=False,
        help="Kafka bootstrap servers, idem [default: $BOTTLER_KAFKA]"),
    metrics: list[str] | None = typer.Option(
        None, "--metrics", "-m", show_default=False,
        help="An app's Prometheus endpoint, as name=URL or URL (repeatable) "
        "[default: $BOTTLER_METRICS, space-separated]"),
    once: bool = typer.Option(False, "--once",
                              help="Print one snapshot and exit (also when not on a terminal); "
                              "exits 1 when something is down."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between refreshes."),
) -> None:
    """One live view of the replication slot, the topics and every process's lag and state."""
    if postgres or broker or metrics or (not has_stack(root) and any(map(os.getenv, ENV))):
        target = explicit_target(postgres, broker, metrics or [])
    else:
        target = stack_target(root)
    watcher = Watcher(target)
    try:
        if once or not sys.stdout.isatty():
            snap = watcher.snapshot()
            Console(width=160).print(render(snap))  # piped: wide enough for a table row
            if not snap.healthy:
                raise typer.Exit(1)
        else:
            live(watcher, interval)
    finally:
        watcher.close()


def live(watcher: Watcher, interval: float) -> None:
    from rich.live import Live

    try:
        with Live(render(watcher.snapshot()), auto_refresh=False) as view:
            while True:
                time.sleep(interval)
                view.update(render(watcher.snapshot()), refresh=True)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how the view ends


def explicit_target(postgres: str | None, broker: str | None, metrics: list[str]) -> Target:
    """Endpoints given by hand (Docker, Kubernetes...); a missing one comes from the
    environment, as for the other commands."""
    postgres = postgres or os.environ.get("BOTTLER_PG_DSN")
    broker = broker or os.environ.get("BOTTLER_KAFKA")
    metrics = metrics or os.environ.get("BOTTLER_METRICS", "").split()
    apps: dict[str, str] = {}
    for item in metrics:
        name, sep, url = item.partition("=")
        if not sep or "://" in name:  # the URL alone
            name, url = "", item
        if not urlsplit(url).scheme.startswith("http"):
            raise BottlerError(f"metrics endpoint {item!r} is not an http(s) URL",
                               "give name=http://host:port/metrics, or the URL alone")
        apps[name or urlsplit(url).netloc] = url
    return Target("given endpoints", postgres, broker, apps)
