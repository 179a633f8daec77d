"""The peers bench's figures and report (tests/bench/peers.py): each tool's runs, the
side-by-side table printed and written to peers.md (every figure with its ratio, bottler ÷
Debezium, and which way is better), the peers' versions and settings, and the ratios as a chart
(peers.png) beside it."""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.table import Table

from compose import jars
from tests.bench import connect
from tests.bench.report import Figure, Target, _cell

CHART = "peers.png"


@dataclass
class Run:
    """One tool's run of one measurement."""

    seconds: float  # to done
    rows: int
    cpu: float | None = None  # the tool's processes, from their start to done
    rss_mb: float | None = None
    from_line: float | None = None  # rows/s from its own log line for the start of the work
    notes: list[str] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.rows / self.seconds

    @property
    def cpu_per_million(self) -> float | None:
        return None if self.cpu is None else self.cpu * 1e6 / self.rows


def say(what: str) -> None:
    print(f"bench-peers {time.strftime('%H:%M:%S')}: {what}", file=sys.stderr, flush=True)



@dataclass
class Row:
    """A line of the side-by-side table: the peer's figure, bottler's and their ratio."""

    what: str
    peer: float | None
    ours: float | None
    unit: str
    better: str  # "higher" or "lower"
    peer_name: str = "Debezium"  # what the peer column holds on this line

    @property
    def ratio(self) -> float | None:
        if not self.peer or self.ours is None or self.peer != self.peer:
            return None
        return self.ours / self.peer

    def ratio_text(self) -> str:
        return "—" if self.ratio is None else f"{self.ratio:.2f}×"


def versions(fmt: str = "json") -> str:
    """The peers' versions, as pinned in compose/jars/pom.xml, and the format Debezium
    writes (``fmt``)."""
    pom = jars.POM.read_text()

    def pin(name: str) -> str:
        found = re.search(rf"<{re.escape(name)}>([^<]+)</", pom)
        return found[1] if found else "?"

    return (f"peers: Debezium PostgreSQL connector {pin('debezium.version')} (pgoutput), "
            f"Debezium JDBC sink {pin('debezium.jdbc.version')}, Kafka Connect standalone "
            f"{pin('connect.version')}, " + (
                f"Avro through Apicurio's converter {pin('apicurio-converter.version')} and "
                f"Apicurio Registry {pin('apicurio.version')} (the stack's registry, both tools'"
                " schemas in it)" if fmt == "avro" else "JSON converter with schemas, our "
                "registry for the capture's Avro") +
            "; broker Apache Kafka " + pin("kafka.version"))


def _settings_lines(converter: dict[str, str]) -> list[str]:
    hidden = ("password",)
    lines = []
    for name, settings in (("Connect worker's converters", converter),
                           ("Connect worker", connect.WORKER), ("Debezium source", connect.SOURCE),
                           ("Debezium JDBC sink", connect.SINK)):
        shown = ", ".join(f"{k}={v}" for k, v in settings.items()
                          if not any(h in k for h in hidden))
        lines.append(f"{name}: {shown}")
    lines.append("Connect JVM: " + " ".join(connect.JVM_OPTIONS))
    return lines


def _fmt(value: float | None, unit: str) -> str:
    if value is None or value != value:
        return "—"
    return f"{value:,.1f} {unit}" if value < 100 else f"{value:,.0f} {unit}"


def print_table(rows: list[Row], header: list[str], notes: list[str],
                converter: dict[str, str] = connect.JSON) -> None:
    console = Console() if sys.stdout.isatty() else Console(width=160)
    table = Table(title="bottler against Debezium (Kafka Connect standalone)",
                  title_justify="left")
    for col in ("figure", "Debezium", "bottler", "bottler ÷ Debezium", "better"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    for r in rows:
        table.add_row(r.what, _fmt(r.peer, r.unit), _fmt(r.ours, r.unit), r.ratio_text(),
                      r.better)
    for line in header:
        console.print(line, highlight=False)
    console.print(table)
    for line in notes + _settings_lines(converter):
        console.print("- " + line, highlight=False, soft_wrap=True)


def write(out: Path, rows: list[Row], header: list[str], notes: list[str],
          converter: dict[str, str] = connect.JSON) -> Path:
    """Write ``out``/peers.md and its chart; return the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    chart = draw(rows, out / CHART)
    path = out / "peers.md"
    path.write_text(markdown(rows, header, notes, chart, converter))
    return path


def markdown(rows: list[Row], header: list[str], notes: list[str],
             chart: str | None = None, converter: dict[str, str] = connect.JSON) -> str:
    lines = ["# bottler against Debezium", ""] + [f"- {h}" for h in header] + [""]
    lines += ["| figure | Debezium | bottler | bottler ÷ Debezium | better |",
              "|---|--:|--:|--:|---|"]
    lines += [f"| {_cell(r.what)} | {_fmt(r.peer, r.unit)} | {_fmt(r.ours, r.unit)} | "
              f"{r.ratio_text()} | {r.better} |" for r in rows]
    if chart:
        lines += ["", f"![bottler ÷ Debezium, figure by figure]({chart})"]
    lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    lines += ["", "## Settings", ""] + [f"- {s}" for s in _settings_lines(converter)]
    return "\n".join(lines) + "\n"


def draw(rows: list[Row], path: Path) -> str | None:
    """The ratios as bars in the main report's style (tests/bench/charts.py): green where
    bottler is better, red where the peer is; None if no figure has both sides."""
    from tests.bench import charts  # matplotlib: only when a report is written

    figures = chart_figures(rows)
    if not figures:
        return None
    charts.peer_ratios(figures, path)
    return path.name


def chart_figures(rows: list[Row]) -> list[Figure]:
    """Each row with both sides as a bar: bottler ÷ the peer, met (green) where bottler is
    better; named by the row, then both values."""
    return [Figure(f"{r.what}\n{r.peer_name} {_fmt(r.peer, r.unit)}, "
                   f"bottler {_fmt(r.ours, r.unit)} ({r.better} is better)", r.ratio, "×",
                   target=Target(">=" if r.better == "higher" else "<", 1.0))
            for r in rows if r.ratio is not None]
