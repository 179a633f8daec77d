"""Figures and how they are printed: each measured rate beside its raw ceiling, and the issue's
target where there is one."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table


@dataclass(frozen=True)
class Target:
    """What the figure should reach: ``value`` (of the figure itself) or ``ratio`` (to its
    ceiling), at least (``>=``) or below (``<``) ``limit``."""

    op: str  # ">=" or "<"
    limit: float
    of: str = "value"  # "value" or "ratio"

    def met(self, figure: Figure) -> bool | None:
        measured = figure.ratio if self.of == "ratio" else figure.value
        if measured is None:
            return None
        return measured >= self.limit if self.op == ">=" else measured < self.limit

    def text(self, unit: str) -> str:
        sign = "≥" if self.op == ">=" else "<"
        return f"{sign} {self.limit:.2f}×" if self.of == "ratio" else f"{sign} {self.limit:,g}"


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    ceiling: Figure | None = None  # the raw rate this one is measured against
    target: Target | None = None
    notes: list[str] = field(default_factory=list)  # how it was measured, side figures

    @property
    def ratio(self) -> float | None:
        return self.value / self.ceiling.value if self.ceiling else None


def _value(f: Figure) -> str:
    return f"{f.value:,.1f} {f.unit}" if f.value < 100 else f"{f.value:,.0f} {f.unit}"


def print_report(figures: list[Figure], header: list[str] = ()) -> None:
    console = Console() if sys.stdout.isatty() else Console(width=140)
    table = Table(title="bottler benchmarks", title_justify="left")
    for col in ("#", "figure", "value", "raw ceiling", "ratio", "target"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    footnotes = []
    for i, f in enumerate(figures, 1):
        verdict = "—"
        if f.target:
            met = f.target.met(f)
            verdict = f.target.text(f.unit) + (" ✓" if met else " ✗" if met is False else "")
        table.add_row(
            str(i),
            f.name,
            _value(f),
            _value(f.ceiling) if f.ceiling else "—",
            f"{f.ratio:.2f}×" if f.ratio is not None else "—",
            verdict,
        )
        footnotes += [f"[{i}] {note}" for note in f.notes]
    for line in header:
        console.print(line, highlight=False)
    console.print(table)
    for line in footnotes:
        console.print(line, highlight=False, soft_wrap=True)


def machine_line() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"machine: {os.cpu_count()} CPUs, load average {load}"


def code_line() -> str:
    """The commit measured, and whether the working tree differs from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except OSError:
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", "capture", "schemas",
                  "bottler")
    return f"code: commit {commit}" + (" with uncommitted changes to capture/schemas/bottler"
                                       if changed else "")
