"""The snapshot's progress bars: live on a terminal; elsewhere (logs, CI) the per-table log
lines say it."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        return Text(f"{task.speed or 0:>9,.0f} rows/s")


def snapshot_bars() -> Progress:
    console = Console(stderr=True)
    return Progress(
        TextColumn("snapshot [bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        RateColumn(), TimeElapsedColumn(), console=console, disable=not console.is_terminal,
    )
