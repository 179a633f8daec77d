"""`make bench-peers`: bottler side by side with the incumbents on this machine, one after the
other on the same table of ROWS rows (~100 B) and the same embedded stack's broker (issue 30):

- PG→PG (tests/bench/peers_pg2pg.py): the initial copy to target-equal (``pg_dump | psql``, the
  floor; Debezium's connector and JDBC sink; ``bottler capture`` and ``bottler materialize
  postgres``, through the topics and seeded), then the catch-up of --changes updates to
  target-equal, each checked by the same checksum against the source;
- capture against capture (tests/bench/peers_capture.py), on the table and on the demo shop's
  four tables scaled to about as many rows (``shop``, tests/bench/peers_shop.py): each tool's
  snapshot, then its streaming catch-up of as many rows again, with its CPU seconds per 1M rows
  and peak RSS;
- live streaming and commit → broker latency on the table, each tool in turn
  (tests/bench/peers_live.py).

Debezium writes Avro through Apicurio's converter, with Apicurio Registry as the stack's
registry (both tools' schemas in it), or JSON with its schema inline (--debezium-format). The
report (tests/bench/peers_report.py) lists Debezium's settings (tests/bench/connect.py: the
converters, WORKER, SOURCE and SINK). See docs/benchmarks.md "Against Debezium".
"""

from __future__ import annotations

import argparse
import os
import time
from contextlib import contextmanager
from pathlib import Path

from compose import apicurio
from compose.stack import isolated_stack
from tests.bench import connect, data, peers_report
from tests.bench.peers_capture import (
    STREAMING_BOTTLER,
    STREAMING_DBZ,
    Shape,
    capture_against_capture,
)
from tests.bench.peers_live import Tool, live_and_latency
from tests.bench.peers_pg2pg import pg2pg
from tests.bench.peers_report import Row, say, versions
from tests.bench.peers_shop import shop
from tests.bench.procs import unwind_on_sigterm
from tests.bench.report import code_line, machine_line

ROWS = 1_000_000
LATENCY_RATE = 5_000  # single-row insert commits a second
LATENCY_SECONDS = 20
PARTS = ("pg2pg", "capture", "shop", "live", "latency")
TABLE = "bench_peers"
REPORT = Path(__file__).resolve().parents[2] / "bench-report"
FORMAT = "avro"  # Debezium's by default: as the capture's, through Apicurio (docs/benchmarks.md)


def _parts(text: str) -> set[str]:
    parts = {p.strip() for p in text.split(",") if p.strip()}
    if unknown := parts - set(PARTS):
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(sorted(unknown))}: "
                                         f"choose among {','.join(PARTS)}")
    return parts


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.peers", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows of the table [{ROWS:,}]")
    parser.add_argument("--changes", type=int, metavar="N",
                        help="updates of the PG→PG catch-up [--rows]; 0 leaves it out")
    parser.add_argument("--parts", type=_parts, default=set(PARTS), metavar="PART,…",
                        help=f"what to measure, among {','.join(PARTS)} [all]; live and latency "
                             "still let each tool snapshot the table first, untimed")
    parser.add_argument("--latency-rate", type=float, default=LATENCY_RATE, metavar="N",
                        help=f"commits a second of the latency load [{LATENCY_RATE:,}]")
    parser.add_argument("--latency-seconds", type=float, default=LATENCY_SECONDS, metavar="S",
                        help=f"how long the latency load runs [{LATENCY_SECONDS}]")
    parser.add_argument("--out", type=Path, default=REPORT, metavar="DIR",
                        help=f"where the report (peers.md, peers.png) goes [{REPORT}]")
    parser.add_argument("--debezium-format", choices=connect.FORMATS, default=FORMAT,
                        help="what Debezium's connectors write: avro (Apicurio's converter, "
                             "with Apicurio Registry as the stack's registry, both tools' "
                             f"schemas in it) or json (schemas inline) [{FORMAT}]")
    parser.add_argument("--skip-pg2pg", action="store_true",
                        help="capture against capture only (--parts capture,live,latency)")
    args = parser.parse_args(argv)
    if args.skip_pg2pg:
        args.parts.discard("pg2pg")
    if args.changes is None:
        args.changes = args.rows
    return args


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    unwind_on_sigterm("bench-peers")  # Connect's directory too
    rows = args.rows
    for old in args.out.glob("connect-*.log"):
        old.unlink()
    header = [code_line(), versions(args.debezium_format), machine_line() + " at the start",
              f"parts: {','.join(p for p in PARTS if p in args.parts)}"]
    started = time.monotonic()
    table: list[Row] = []
    notes: list[str] = []
    with _registry(args.debezium_format), isolated_stack() as stack:
        ep = stack.endpoints
        env = {"BOTTLER_PG_DSN": ep.pg_dsn, "BOTTLER_KAFKA": ep.kafka,
               "BOTTLER_REGISTRY": ep.registry}
        converter = connect.converters(args.debezium_format, ep.registry)
        roots = {"postgres": stack.postgres.running_pid(), "broker": stack.broker.running_pid(),
                 "registry": stack.registry.running_pid()}
        say(f"filling {TABLE} with {rows:,} rows")
        data.create_table(ep.pg_dsn, TABLE)
        data.fill(ep.pg_dsn, TABLE, 1, rows)
        data.vacuum(ep.pg_dsn, TABLE)
        if "pg2pg" in args.parts:
            table += pg2pg(ep, env, TABLE, rows, args.changes, roots, notes, args.out,
                           converter)
            header.append(machine_line() + " after PG→PG")
        if args.parts & {"capture", "live", "latency"}:
            table += _capture(ep, env, args, roots, notes, stack.root, converter)
        if "shop" in args.parts:
            say(f"filling the demo shop's tables with about {rows:,} rows")
            table += capture_against_capture(ep, env, shop(ep.pg_dsn, rows), True, roots,
                                             notes, args.out, stack.root, converter)
    header.append(machine_line() + f" at the end; {time.monotonic() - started:.0f} s in all")
    peers_report.print_table(table, header, notes, converter)
    say(f"report written to {peers_report.write(args.out, table, header, notes, converter)}")


@contextmanager
def _registry(fmt: str):
    """The stack's registry for ``fmt``: Apicurio for Avro (Debezium's converter speaks its
    own API; the capture its Confluent-compatible one), else the one asked for (ours)."""
    before = os.environ.get(apicurio.REGISTRY_ENV)
    if fmt == "avro":
        os.environ[apicurio.REGISTRY_ENV] = "apicurio"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(apicurio.REGISTRY_ENV, None)
        else:
            os.environ[apicurio.REGISTRY_ENV] = before


def _capture(ep, env, args, roots, notes, root: Path, converter) -> list[Row]:
    """Capture against capture on the bench's table, then live and latency on it."""
    parts = args.parts
    table = Shape("peers", "", (TABLE,), args.rows,
                  lambda dsn: data.fill(dsn, TABLE, args.rows + 1, args.rows))
    key_id = connect.key_reader(args.debezium_format)

    def live(worker, capture, dbz_topic, ours_topic, inserted) -> list[Row]:
        if not parts & {"live", "latency"}:
            return []
        return live_and_latency(
            ep.pg_dsn, ep.kafka, TABLE,
            [Tool("Debezium", worker, dbz_topic, STREAMING_DBZ, key_id),
             Tool("bottler", capture, ours_topic, STREAMING_BOTTLER)],
            inserted + 1, args.rows, args.latency_rate, args.latency_seconds, parts, roots,
            notes)

    return capture_against_capture(ep, env, table, "capture" in parts, roots, notes, args.out,
                                   root, converter, then=live)


if __name__ == "__main__":
    main()
