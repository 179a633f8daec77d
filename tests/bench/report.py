"""Figures and how they are printed: each measured rate beside its raw ceiling."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Console
from rich.table import Table


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    ceiling: Figure | None = None  # the raw rate this one is measured against

    @property
    def ratio(self) -> float | None:
        return self.value / self.ceiling.value if self.ceiling else None


def print_report(figures: list[Figure]) -> None:
    table = Table(title="bottler benchmarks", title_justify="left")
    for col in ("figure", "value", "raw ceiling", "ratio"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for f in figures:
        table.add_row(
            f.name,
            f"{f.value:,.0f} {f.unit}",
            f"{f.ceiling.value:,.0f} {f.ceiling.unit}" if f.ceiling else "—",
            f"{f.ratio:.2f}×" if f.ratio is not None else "—",
        )
    Console().print(table)
