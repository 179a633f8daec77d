"""The primary's CPU with the capture decoding on it, on its standby, and with no capture: the
same fixed write load on the primary (PostgreSQL 18, a primary and a physical standby of its
own, a Kafka node of its own, JSON output), the CPU seconds of the primary's and the standby's
server processes over the same window, with the machine's load average:

    python -m tests.bench.standby_cpu --seconds 60 --rate 200

docs/benchmarks.md ("Capture from a standby") has figures."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import psycopg

from tests.bench.procs import CaptureProcess, cpu_over, running
from tests.support.kafka_node import own_kafka
from tests.support.standby import DB, primary_and_standby

MODES = ("none", "primary", "standby")  # where the capture decodes


def load(dsn: str, rate: float, stop: threading.Event, done: list[int]) -> None:
    """``rate`` transactions a second (an insert of a 200-byte row and an update), paced."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        start, n = time.monotonic(), 0
        while not stop.is_set():
            n += 1
            with conn.transaction():
                conn.execute("insert into items (payload, n) values (repeat('x', 200), 0)")
                conn.execute("update items set n = n + 1 where id = %s", (n,))
            done[0] += 1
            time.sleep(max(0.0, start + n / rate - time.monotonic()))


def measure(primary, standby, seconds: float, rate: float) -> dict[str, float]:
    """CPU seconds of each server's processes while the load runs for ``seconds``, and of the
    primary's walsenders among them (decoding, on the primary, happens in its walsender)."""
    stop, done = threading.Event(), [0]
    writer = threading.Thread(target=load, args=(primary.dsn(DB), rate, stop, done))
    writer.start()
    time.sleep(3)  # the load under way before the window opens
    before = done[0]
    roots = {"primary": primary.running_pid(), "standby": standby.running_pid()}
    decoders = {}  # the walsenders of logical slots: where decoding happens
    for name, server in (("primary", primary), ("standby", standby)):
        with psycopg.connect(server.dsn(DB)) as conn:
            decoders |= {f"{name} decoding {pid}": pid for pid, in conn.execute(
                "select active_pid from pg_replication_slots where slot_type = 'logical' "
                "and active_pid is not null")}
    try:
        # a server's tree includes its walsenders: its figure includes its decoding
        spent = cpu_over(roots | decoders, seconds)
    finally:
        stop.set()
        writer.join()
    for key in decoders:
        kind = key.rsplit(" ", 1)[0]
        spent[kind] = spent.get(kind, 0.0) + spent.pop(key)
    return {**spent, "transactions": done[0] - before, "load": os.getloadavg()[0]}


def capture(mode: str, primary, standby, bootstrap: str) -> CaptureProcess:
    env = {"BOTTLER_PG_DSN": (standby if mode == "standby" else primary).dsn(DB),
           "BOTTLER_PRIMARY": primary.dsn(DB)}
    return CaptureProcess(mode, env, ["-s", f"bench_{mode}", "-p", f"bench_{mode}", "-b",
                                      bootstrap, "-f", "json", "--heartbeat-interval", "10"])


def one(mode: str, primary, standby, bootstrap: str, args) -> dict[str, float]:
    """One window with the capture decoding on ``mode`` (none: no capture)."""
    if mode == "none":
        return measure(primary, standby, args.seconds, args.rate)
    with running(capture(mode, primary, standby, bootstrap)) as proc:
        proc.wait_line(r"streaming from slot", 300)
        figures = measure(primary, standby, args.seconds, args.rate)
    server = standby if mode == "standby" else primary  # its slot keeps no WAL after
    with psycopg.connect(server.dsn(DB), autocommit=True) as conn:
        conn.execute("select pg_drop_replication_slot(%s)", (f"bench_{mode}",))
    with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:  # publications: there
        conn.execute(f"drop publication bench_{mode}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="each window's length")
    parser.add_argument("--rate", type=float, default=200.0, help="transactions a second")
    parser.add_argument("--rounds", type=int, default=1, help="each mode measured this often")
    args = parser.parse_args()
    figures = []
    with own_kafka() as kafka, primary_and_standby("bench") as (primary, standby):
        with psycopg.connect(primary.dsn(DB), autocommit=True) as conn:
            conn.execute("create table items (id bigserial primary key, payload text, n int)")
        for _ in range(args.rounds):
            for mode in MODES:
                print(f"measuring with the capture on: {mode}", file=sys.stderr)
                figures.append((mode, one(mode, primary, standby, kafka.bootstrap, args)))
    print("| capture decodes on | primary CPU s | of which decoding | standby CPU s | of which "
          "decoding | transactions | primary CPU ms per 1000 | load average (1 min) |\n"
          + "|---" * 8 + "|")
    for mode, f in figures:
        print(f"| {mode} | {f['primary']:.1f} | {f.get('primary decoding', 0):.1f} | "
              f"{f['standby']:.1f} | {f.get('standby decoding', 0):.1f} | "
              f"{f['transactions']:.0f} | {1e6 * f['primary'] / f['transactions']:.0f} | "
              f"{f['load']:.2f} |")
    print(f"({args.seconds:.0f} s windows at {args.rate:.0f} transactions a second asked)")


if __name__ == "__main__":
    main()
