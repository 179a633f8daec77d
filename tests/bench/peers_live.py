"""The peers bench's live figures (tests/bench/peers.py), each tool in turn on the same table
while the other is stopped (the machine's cores are the first tool's alone):

- live streaming: the tool started and caught up (its topic holds every row of the table), then
  ROWS more rows inserted in transactions of LIVE_BATCH rows, as the main bench's live figure
  (tests/bench/stream.py), timed from the first commit until its topic holds them all;
- commit → broker append latency: the main bench's load and consumer (tests/bench/latency.py),
  single-row insert transactions at RATE a second for SECONDS, each message's broker append
  time (LogAppendTime, on both tools' topics) against its commit, matched by the row's id in
  the message's key (the capture's Avro, Debezium's Avro or JSON).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tests.bench import data
from tests.bench.kafka import TopicWatch, wait_until
from tests.bench.latency import avro_id, latency
from tests.bench.peers_report import Row, Run, say
from tests.bench.procs import CaptureProcess, CpuMeter, cpu_seconds

LIVE_BATCH = 1_000  # rows per transaction of the live insert
TIMEOUT = 1200  # seconds for a tool to catch up, or to stream the live rows


@dataclass
class Tool:
    """One side: its process (stopped, its slot made), its table topic, its 'streaming' line."""

    name: str
    proc: CaptureProcess
    topic: str
    streaming: str
    key_id: Callable[[bytes], int] = avro_id


def live_and_latency(dsn: str, bootstrap: str, table: str, tools: list[Tool], next_id: int,
                     rows: int, rate: float, seconds: float, parts: set[str], roots,
                     notes: list[str]) -> list[Row]:
    """Rows of ``table`` have ids below ``next_id``; the parts asked ("live", "latency")."""
    live: dict[str, Run] = {}
    lat: dict[str, list] = {}
    for tool in tools:
        watch = TopicWatch(bootstrap, tool.topic)
        try:
            _resume(tool, watch, next_id - 1)
            if "live" in parts:
                say(f"live: {tool.name}, {rows:,} rows in transactions of {LIVE_BATCH:,}")
                live[tool.name] = _live(dsn, table, tool, watch, next_id, rows, roots)
                next_id += rows
            if "latency" in parts:
                say(f"latency: {tool.name} at {rate:,.0f} commits/s for {seconds:.0f} s")
                lat[tool.name] = latency(dsn, bootstrap, table, tool.topic, next_id, rate,
                                         seconds, tool.proc, roots, key_id=tool.key_id,
                                         who=tool.name)
                next_id += int(rate * seconds)
        finally:
            watch.close()
            tool.proc.stop()
    peer, ours = (t.name for t in tools)
    figures = []
    if live:
        notes += [f"live, {who}: " + n for who, r in live.items() for n in r.notes]
        figures += [
            Row(f"live streaming, commit → all rows in Kafka ({LIVE_BATCH:,}-row transactions; "
                "rows/s)", live[peer].rate, live[ours].rate, "rows/s", "higher"),
            Row("CPU s per 1M rows, live (the tool's processes)", live[peer].cpu_per_million,
                live[ours].cpu_per_million, "s", "lower"),
        ]
    if lat:
        achieved = {who: f[0].value for who, f in lat.items()}
        notes += [f"latency, {who}: {f.name}: {f.value:,.1f} {f.unit}; " + "; ".join(f.notes)
                  for who, figs in lat.items() for f in figs if f.notes]
        figures.append(Row(f"latency load: single-row commits/s achieved ({rate:,.0f} asked)",
                           achieved[peer], achieved[ours], "/s", "higher"))
        figures += [
            Row(f"commit → broker append p{p} at {rate:,.0f} commits/s (ms)", lat[peer][i].value,
                lat[ours][i].value, "ms", "lower")
            for i, p in ((1, 50), (2, 99))
        ]
    return figures


def _resume(tool: Tool, watch: TopicWatch, rows: int) -> None:
    """Start the tool and wait until it streams and its topic holds ``rows`` messages: it has
    caught up with whatever was inserted while it was stopped."""
    tool.proc.start()
    tool.proc.wait_line(tool.streaming, timeout=TIMEOUT)

    def caught_up() -> bool:
        tool.proc.check_alive()
        return watch.end() >= rows

    wait_until(caught_up, TIMEOUT, f"{tool.name} to catch up ({tool.topic})", every=0.1)


def _live(dsn: str, table: str, tool: Tool, watch: TopicWatch, first: int, rows: int,
          roots) -> Run:
    before = watch.end()  # not the row count: a restarted connector may repeat a few
    cpu0 = cpu_seconds(tool.proc.pid)
    meter = CpuMeter(roots).start()
    committed, _ = data.fill(dsn, table, first, rows, -(-rows // LIVE_BATCH))

    done = watch.reached(before + rows, TIMEOUT, tool.proc.check_alive)
    cpu = cpu_seconds(tool.proc.pid) - cpu0
    took = done - committed
    return Run(took, rows, cpu, notes=[
        f"{rows:,} rows inserted while it streams, {took:.1f} s from the first commit to the "
        f"last row in its topic; its CPU {cpu:.1f} s; {meter.note()} (the insert included)"])
