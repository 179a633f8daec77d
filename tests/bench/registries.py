"""What each schema registry the stack can run costs: ours (schemas/registry_server, its schemas
in the broker) and Apicurio Registry 3 (compose/apicurio.py, H2 in a file), started in turn on
the same stack, each timed from its start until it answers ``/subjects``, with the CPU seconds
and RSS of its process then and after registering the demo shop's schemas, with the machine's
load average:

    python -m tests.bench.registries --rounds 3

docs/stack.md ("Another schema registry") has figures."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import httpx

from compose import services
from compose.procs import free_port
from compose.stack import isolated_stack

SCHEMAS = 40  # subjects registered, about the demo shop's keys and values times five


def process_figures(pid: int) -> tuple[float, float]:
    """(CPU seconds, RSS in MB) of the process ``pid``."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    rss = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text(
        ).splitlines() if line.startswith("VmRSS:"))
    return cpu, rss / 1024


def one_start(root, kind: str, kafka_port: int) -> dict[str, float]:
    port = free_port()
    registry = services.registry(root, port, kafka_port, kind)
    url = services.registry_url(port, kind)
    began = time.monotonic()
    registry.start()
    try:
        ready = time.monotonic() - began
        pid = registry.supervision().pid
        cpu, rss = process_figures(pid)
        for n in range(SCHEMAS):
            schema = {"type": "record", "name": f"r{n}", "fields": [
                {"name": "id", "type": "long"}, {"name": f"f{n}", "type": "string"}]}
            httpx.post(f"{url}/subjects/s{n}-value/versions", timeout=30, json={
                "schema": json.dumps(schema)}).raise_for_status()
        _, busy = process_figures(pid)
        return {"ready s": ready, "CPU s at ready": cpu, "RSS MB at ready": rss,
                f"RSS MB after {SCHEMAS} schemas": busy}
    finally:
        registry.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with isolated_stack() as stack:
        stack.registry.stop()  # the stack's own: each is started here in turn
        found: dict[str, list[dict[str, float]]] = {"bottler": [], "apicurio": []}
        for n in range(args.rounds):
            for kind in found:
                root = stack.root / f"{kind}-{n}"
                root.mkdir()
                found[kind].append(one_start(root, kind, stack.ports.kafka))
                print(kind, n, found[kind][-1], "load", os.getloadavg(), flush=True)
    for kind, runs in found.items():
        medians = {k: sorted(r[k] for r in runs)[len(runs) // 2] for k in runs[0]}
        print(kind, "median:", ", ".join(f"{k} {v:.1f}" for k, v in medians.items()))


if __name__ == "__main__":
    main()
