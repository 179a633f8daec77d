"""The report's PNG charts (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
from matplotlib.ticker import FuncFormatter, NullFormatter  # noqa: E402

from tests.bench.report import Figure, ScalePoint  # noqa: E402

MET, MISSED, NONE = "#3a923a", "#c03d3e", "#8c8c8c"
WIDTH = 10  # inches; at 100 dpi
ROW = 0.42  # inches per bar of a horizontal bar chart


def draw_all(out: Path, figures: Sequence[Figure],
             scaling: Sequence[ScalePoint]) -> dict[str, str]:
    """Draw every chart that has data into ``out``; return {title: file name}."""
    drawn = {}
    for title, name, draw, data in (
        ("Rates against their raw ceilings", "ratios.png", ratios,
         [f for f in figures if f.ratio is not None]),
        ("Scaling with the number of rows", "scaling.png", scaling_chart, list(scaling)),
        ("Latency and lag percentiles", "latency.png", latencies,
         [f for f in figures if f.unit == "ms"]),
    ):
        if data:
            draw(data, out / name)
            drawn[title] = name
    return drawn


def _colour(f: Figure) -> str:
    met = f.target.met(f) if f.target else None
    return NONE if met is None else MET if met else MISSED


def _bars(figures: Sequence[Figure], values: list[float], marks: list[float | None],
          xlabel: str, title: str, path: Path, reference: float | None = None,
          log: bool = False, label: int = 60, row: float = ROW) -> None:
    """Horizontal bars, the first figure on top, each with its target as a black tick;
    ``label`` characters of each figure's name (a line of it) at most."""
    fig, ax = plt.subplots(figsize=(WIDTH, 1.2 + row * len(figures)))
    ys = range(len(figures))[::-1]
    ax.barh(list(ys), values, color=[_colour(f) for f in figures], height=0.6)
    for y, value in zip(ys, values, strict=True):
        ax.annotate(f" {_number(value)}", (value, y), va="center", fontsize=8)
    marked = [(y, m) for y, m in zip(ys, marks, strict=True) if m is not None]
    if marked:
        ax.scatter([m for _, m in marked], [y for y, _ in marked], marker="|", s=400,
                   color="black", linewidths=2, zorder=3, label="target")
        ax.legend(loc="upper right", fontsize=8)
    if reference is not None:
        ax.axvline(reference, color="black", linewidth=0.8, linestyle=":")
    ax.set_yticks(list(ys), ["\n".join(_short(line, label) for line in f.name.split("\n"))
                             for f in figures], fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    shown = [v for v in (*values, *(m for _, m in marked), reference) if v]
    if log:  # ratios: a tenth and ten times are as far from 1
        ax.set_xscale("log")
        ax.set_xlim(min(shown) / 2, max(shown) * 2.5)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    else:
        ax.set_xlim(0, max(shown, default=1) * 1.18)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def ratios(figures: Sequence[Figure], path: Path) -> None:
    """(a) Each rate as a ratio to its raw ceiling; a value target is shown as the ratio it
    amounts to against this run's ceiling."""
    _bars(figures, [f.ratio for f in figures],
          [f.target.as_ratio(f) if f.target else None for f in figures],
          "ratio to the raw ceiling measured in the same run (1 = as fast as the ceiling)",
          "Rates against their raw ceilings (green: target met, red: missed)", path,
          reference=1.0, log=True)


def peer_ratios(figures: Sequence[Figure], path: Path) -> None:
    """bench-peers: each figure as bottler ÷ Debezium (its name: what, then both values), green
    where bottler is better (a higher rate, a lower cost), red where it is not."""
    _bars(figures, [f.value for f in figures], [None] * len(figures),
          "bottler ÷ Debezium (log scale; 1 = the same)",
          "bottler against Debezium (green: bottler better, red: worse)", path,
          reference=1.0, log=True, label=78, row=0.55)


def latencies(figures: Sequence[Figure], path: Path) -> None:
    """(c) Latency and lag percentiles, in ms, with their targets."""
    _bars(figures, [f.value for f in figures],
          [f.target.limit if f.target else None for f in figures],
          "milliseconds", "Latency and lag percentiles (green: target met, red: missed)", path)


def scaling_chart(points: Sequence[ScalePoint], path: Path) -> None:
    """(b) Rows (log) against rows/s (log) per series, each with its ceiling dashed."""
    fig, ax = plt.subplots(figsize=(WIDTH, 6))
    series = sorted({p.series for p in points})
    colours = plt.get_cmap("tab10")
    for n, name in enumerate(series):
        mine = sorted((p for p in points if p.series == name), key=lambda p: p.rows)
        rows = [p.rows for p in mine]
        ax.plot(rows, [p.figure.value for p in mine], marker="o", color=colours(n), label=name)
        with_ceiling = [p for p in mine if p.figure.ceiling]
        if with_ceiling:
            ax.plot([p.rows for p in with_ceiling],
                    [p.figure.ceiling.value for p in with_ceiling], marker="s",
                    linestyle="--", color=colours(n), alpha=0.7,
                    label=f"ceiling: {_short(with_ceiling[0].figure.ceiling.name, 55)}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    sizes = sorted({p.rows for p in points})
    ax.set_xticks(sizes, [_count(n) for n in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _count(v)))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: _count(v) if str(v)[0] in "25"
                                               else ""))
    ax.set_xlabel("rows")
    ax.set_ylabel("rows/s")
    ax.set_title("Capture and apply rates by table size (dashed: raw ceiling, same size)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _number(v: float) -> str:
    """As the report's table writes ratios: two decimals, three below 0.1."""
    return f"{v:,.0f}" if v >= 10 else f"{v:.2f}" if v >= 0.1 else f"{v:.3f}"


def _count(n: float) -> str:
    """1500 → 1.5k, 2000000 → 2M."""
    for size, suffix in ((1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:.3g}{suffix}"
    return f"{n:.3g}"


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
