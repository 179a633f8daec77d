"""Drawing a snapshot for the terminal: the slots, the topics (with each materializer's lag on
them) and the appliance's processes."""

from __future__ import annotations

import time

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from bottler.status.figures import (
    CAUGHT_UP,
    DOWN,
    REBUILDING,
    RUNNING,
    STARTING,
    App,
    Restarts,
    Snapshot,
)
from common.redact import redact

STATE_STYLE = {CAUGHT_UP: "green", "streaming": "green", REBUILDING: "yellow",
               "snapshot": "yellow", STARTING: "cyan", RUNNING: "green", DOWN: "bold red"}


def render(snap: Snapshot) -> RenderableType:
    header = Text.assemble(("bottler status", "bold"), f"  {snap.title}  ",
                           (time.strftime("%H:%M:%S"), "dim"))
    parts = [header]
    if snap.slots is not None or snap.slots_error:
        parts.append(_slots(snap))
    parts += [Text(f"failover: {line}", "yellow") for line in snap.failover]
    if snap.topics is not None or snap.topics_error:
        parts.append(_topics(snap))
    if snap.instances or snap.instances_error:
        parts.append(_instances(snap))
    return Group(*parts, _processes(snap))


def _instances(snap: Snapshot) -> RenderableType:
    """The views running as several instances (--join-group): who holds which partitions."""
    if snap.instances_error:
        return _error("View instances", snap.instances_error)
    table = _table("View instances (consumer groups)", "group", "instance", "host",
                   "partitions held")
    for i in snap.instances or []:
        held = "; ".join(f"{t}[{','.join(map(str, p))}]" for t, p in i.partitions.items())
        table.add_row(i.group, i.name, i.host or "-", held)
    return table


def _slots(snap: Snapshot) -> RenderableType:
    if snap.slots_error:
        return _error("Replication slots", snap.slots_error)
    # failover and synced: on PostgreSQL 17+ only, whose pg_replication_slots has them
    failover = any(s.failover is not None for s in snap.slots or [])
    columns = ["slot", "database", "active", "retained WAL", "confirmed lag", "WAL status"]
    table = _table("Replication slots", *columns, *(["failover", "synced"] if failover else []))
    for s in snap.slots or []:
        active = Text("yes", "green") if s.active else Text("no", "yellow")
        extra = [_yes_no(s.failover), _yes_no(s.synced)] if failover else []
        table.add_row(s.name, s.database or "-", active, _bytes(s.retained_wal),
                      _bytes(s.confirmed_lag), s.wal_status or "-", *extra)
    if not snap.slots:
        table.add_row(Text("none", "dim"), *[""] * (len(columns) - 1))
    return table


def _yes_no(flag: bool | None) -> str:
    return "-" if flag is None else "yes" if flag else "no"


def _topics(snap: Snapshot) -> RenderableType:
    if snap.topics_error:
        return _error("Topics", snap.topics_error)
    materializers = snap.materializers
    table = _table("Topics", "topic", "partitions", "messages",
                   *(f"lag {m.name}" for m in materializers))
    for t in sorted(snap.topics or [], key=lambda t: (t.control, t.name)):
        style = "dim" if t.control else None
        if "dead-letter" in t.name and t.messages:
            style = "bold red"
        lags = [_count(m.lag.get(t.name)) for m in materializers]
        table.add_row(Text(t.name, style or ""), str(t.partitions), _count(t.messages), *lags)
    if not snap.topics:
        table.add_row(Text("none", "dim"), "", "", *[""] * len(materializers))
    return table


def _processes(snap: Snapshot) -> RenderableType:
    table = _table("Processes", "process", "part", "state", "behind", "done", "dead letters",
                   "restarts", "endpoint")
    for app in snap.apps:
        url = redact(app.url)
        restarts = _restarts(app)
        if app.down:
            table.add_row(app.name, "-", _state(DOWN), "", "", "", restarts,
                          Text(app.error, "red"))
            continue
        if app.capture:
            c = app.capture
            done = (f"{_count(c.events)} events" if c.snapshot_complete
                    else f"{_count(c.snapshot_rows)} rows copied")
            letters = Text(_count(c.dead_letters), "bold red" if c.dead_letters else "")
            table.add_row(app.name, "capture", _state(c.state), f"{_bytes(c.lag_bytes)} WAL",
                          done, letters, restarts, url)
        for m in app.materializers:
            letters = Text(_count(m.dead_letters), "bold red" if m.dead_letters else "")
            table.add_row(app.name, m.name, _state(m.state), f"{_count(m.total_lag)} messages",
                          f"{_count(m.changes)} changes", letters, restarts, url)
        if app.load_transactions is not None:
            table.add_row(app.name, "load", _state(RUNNING), "",
                          f"{_count(app.load_transactions)} transactions", "-", restarts, url)
        elif not app.capture and not app.materializers:
            table.add_row(app.name, "-", _state(STARTING), "", "", "", restarts, url)
    if not snap.apps:
        table.add_row(Text("none", "dim"), *[""] * 7)
    return Group(table, *(restarts_line(app.name, app.restarts) for app in snap.apps
                          if app.restarts and app.restarts.count))


def _restarts(app: App) -> Text:
    if app.restarts is None:
        return Text("-")
    return Text(_count(app.restarts.count), "bold red" if app.restarts.count else "")


def restarts_line(name: str, r: Restarts) -> Text:
    """How often a process was restarted, and why last time: one line, in red."""
    times = "time" if r.count == 1 else "times"
    at = time.strftime(" at %H:%M:%S", time.localtime(r.failed_at)) if r.failed_at else ""
    why = f"{r.last_exit}: {r.last_error}" if r.last_error else r.last_exit
    return Text(f"{name} restarted {r.count} {times}, last{at} ({why})", "red")


TEXT_COLUMNS = {"slot", "database", "topic", "process", "part", "state", "endpoint"}


def _table(title: str, *columns: str) -> Table:
    # No outer edges: two lines fewer per table in a terminal that may be short.
    table = Table(title=title, title_justify="left", title_style="bold", show_edge=False)
    for col in columns:  # words to the left, figures to the right
        table.add_column(col, justify="left" if col in TEXT_COLUMNS else "right",
                         no_wrap=col in ("slot", "topic"))
    return table


def _error(title: str, message: str) -> RenderableType:
    return Group(Text(title, "bold"), Text(f"unavailable: {message}", "red"))


def _state(state: str) -> Text:
    return Text(state, STATE_STYLE.get(state, ""))


def _count(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    units = ("B", "KiB", "MiB", "GiB", "TiB")
    size, unit = float(n), 0
    while abs(size) >= 1024 and unit < len(units) - 1:
        size, unit = size / 1024, unit + 1
    return f"{n} B" if unit == 0 else f"{size:,.1f} {units[unit]}"
