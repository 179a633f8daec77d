"""What a long-running warehouse's Delta tables look like, and what its job costs, e.g. on
`make up`'s stack with the spark route under the demo load (docs/warehouse.md, "Housekeeping"):

    python -m tests.bench.warehouse_upkeep --dir .stack --seconds 60

Per table: its version, the data files of the current version and those on disk, the log entries
since the last checkpoint, the size on disk (and the log's part of it) against the current
version's data; then the warehouse process's CPU (with all it started) over ``--seconds``, and
the load average."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pyarrow as pa

from compose.stack import Stack
from materializers.warehouse.delta import open_table
from materializers.warehouse.sink import delta_tables
from tests.bench.procs import cpu_over


def table_figures(path: Path) -> dict | None:
    table = open_table(path)
    if table is None:  # claimed, its first commit not in yet
        return None
    log = path / "_delta_log"
    checkpoint = json.loads((log / "_last_checkpoint").read_text())["version"] \
        if (log / "_last_checkpoint").exists() else None
    data = sum(pa.table(table.get_add_actions(flatten=True)).column("size_bytes").to_pylist())
    on_disk = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    log_bytes = sum(p.stat().st_size for p in log.iterdir() if p.is_file())
    return {"version": table.version(), "files": len(table.file_uris()),
            "files_on_disk": sum(1 for _ in path.rglob("*.parquet")
                                 if "_delta_log" not in _.parts),
            "since_checkpoint": table.version() - (checkpoint if checkpoint is not None else -1),
            "checkpoints": len(list(log.glob("*.checkpoint*.parquet"))),
            "data_kb": data / 1024, "disk_kb": on_disk / 1024, "log_kb": log_bytes / 1024}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(".stack"))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--pid", type=int, help="the warehouse job's process, if not the stack's")
    args = parser.parse_args()
    stack = Stack(args.dir)
    print(f"{'table':24} {'version':>7} {'files':>5} {'on disk':>7} {'since ckpt':>10} "
          f"{'ckpts':>5} {'data KB':>8} {'disk KB':>8} {'log KB':>7} {'ratio':>5}")
    for path in delta_tables(args.dir / "warehouse"):
        f = table_figures(path)
        if f is None:
            continue
        print(f"{path.parent.name + '.' + path.name:24} {f['version']:7} {f['files']:5} "
              f"{f['files_on_disk']:7} {f['since_checkpoint']:10} {f['checkpoints']:5} "
              f"{f['data_kb']:8.0f} {f['disk_kb']:8.0f} {f['log_kb']:7.0f} "
              f"{f['disk_kb'] / max(f['data_kb'], 1e-9):5.1f}")
    pid = args.pid or stack.status().get("warehouse")
    if pid is not None:
        spent = cpu_over({"warehouse": pid}, args.seconds)["warehouse"]
        print(f"warehouse CPU: {spent / args.seconds:.3f} core over {args.seconds:.0f} s")
    print("load average: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
