"""Figures and how they are printed: each measured rate beside its raw ceiling, and the issue's
target where there is one."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

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

    def as_ratio(self, figure: Figure) -> float | None:
        """The limit as a ratio to the figure's ceiling (a value target divided by it)."""
        if self.of == "ratio":
            return self.limit
        return self.limit / figure.ceiling.value if figure.ceiling else None


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


@dataclass(frozen=True)
class ScalePoint:
    """One size of a scaling series: ``figure`` (with its ceiling) measured on ``rows`` rows."""

    series: str  # e.g. "capture stream, catch-up"
    rows: int
    figure: Figure


def verdict(f: Figure) -> str:
    if not f.target:
        return "—"
    met = f.target.met(f)
    return "✓ met" if met else "✗ missed" if met is False else "?"


def _value(f: Figure) -> str:
    return f"{f.value:,.1f} {f.unit}" if f.value < 100 else f"{f.value:,.0f} {f.unit}"


def print_report(figures: list[Figure], header: list[str] = ()) -> None:
    console = Console() if sys.stdout.isatty() else Console(width=140)
    table = Table(title="bottler benchmarks", title_justify="left")
    for col in ("#", "figure", "value", "raw ceiling", "ratio", "target"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    footnotes = []
    for i, f in enumerate(figures, 1):
        table.add_row(
            str(i),
            f.name,
            _value(f),
            _value(f.ceiling) if f.ceiling else "—",
            _ratio(f),
            f"{f.target.text(f.unit)} {verdict(f)[0]}" if f.target else "—",
        )
        footnotes += [f"[{i}] {note}" for note in f.notes]
    for line in header:
        console.print(line, highlight=False)
    console.print(table)
    for line in footnotes:
        console.print(line, highlight=False, soft_wrap=True)


def _ratio(f: Figure) -> str:
    if f.ratio is None:
        return "—"
    return f"{f.ratio:.2f}×" if f.ratio >= 0.1 else f"{f.ratio:.3f}×"


# -- the written report: bench-report/README.md and its charts ---------------------------------

def write_report(out: Path, figures: Sequence[Figure], header: Sequence[str] = (),
                 scaling: Sequence[ScalePoint] = ()) -> Path:
    """Write ``out``/README.md and the PNG charts it shows; return the README's path."""
    from tests.bench import charts  # matplotlib: only when a report is written

    out.mkdir(parents=True, exist_ok=True)
    drawn = charts.draw_all(out, figures, scaling)
    readme = out / "README.md"
    readme.write_text(markdown(figures, header, scaling, drawn))
    return readme


def markdown(figures: Sequence[Figure], header: Sequence[str] = (),
             scaling: Sequence[ScalePoint] = (), charts: dict[str, str] | None = None) -> str:
    """The report as Markdown; ``charts`` maps a chart's title to its file, relative to it."""
    lines = ["# bottler benchmarks", ""]
    lines += [f"- {_cell(line)}" for line in header] + [""]
    lines += ["| # | figure | value | raw ceiling | ratio | target | verdict |",
              "|--:|---|--:|--:|--:|--:|---|"]
    notes = []
    for i, f in enumerate(figures, 1):
        lines.append("| " + " | ".join([
            str(i), _cell(f.name), _value(f), _value(f.ceiling) if f.ceiling else "—",
            _ratio(f), f.target.text(f.unit) if f.target else "—", verdict(f),
        ]) + " |")
        notes += [f"- [{i}] {note}" for note in f.notes]
    if notes:
        lines += ["", "## Notes", "", *notes]
    if scaling:
        lines += ["", "## Scaling", "",
                  "Each rate against its raw ceiling measured on the same number of rows.", "",
                  "| series | rows | value | raw ceiling | ratio |", "|---|--:|--:|--:|--:|"]
        for p in sorted(scaling, key=lambda p: (p.series, p.rows)):
            f = p.figure
            lines.append(f"| {_cell(p.series)} | {p.rows:,} | {_value(f)} | "
                         f"{_value(f.ceiling) if f.ceiling else '—'} | {_ratio(f)} |")
    if charts:
        lines += ["", "## Charts"]
        for title, path in charts.items():
            lines += ["", f"### {title}", "", f"![{title}]({path})"]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table row."""
    return text.replace("|", "\\|").replace("\n", " ")


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
    code = ("capture", "schemas", "materializers", "common", "bottler")
    changed = git("status", "--porcelain", "--untracked-files=no", "--", *code)
    return f"code: commit {commit}" + (" with uncommitted changes to " + "/".join(code)
                                       if changed else "")
