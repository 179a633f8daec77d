"""What a running stack costs: the CPU share of each of its processes (with everything each
started) over a window, e.g. `make up`'s stack under its demo load, then with the load stopped:

    python -m tests.bench.stack_cpu --dir .stack --seconds 60
    python -m tests.bench.stack_cpu --dir .stack --seconds 60 --without load  # after --settle

Prints one line per process: CPU seconds over the window divided by its length (cores)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from compose.stack import Stack
from tests.bench.procs import cpu_over


def measure(stack: Stack, seconds: float) -> dict[str, float]:
    """Cores used by each running process of ``stack`` over ``seconds`` (its supervisor and
    all it started counted with it; PostgreSQL with its server processes)."""
    pids = {name: pid for name, pid in stack.status().items() if pid is not None}
    return {name: spent / seconds for name, spent in cpu_over(pids, seconds).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path(".stack"))
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--without", action="append", default=[],
                        help="stop this app first (e.g. load), for an idle figure")
    parser.add_argument("--settle", type=float, default=30.0,
                        help="seconds to wait after --without stops an app, before measuring: "
                        "the views finish what was in flight (the warehouse's last micro-batch "
                        "and merge take ~20 s after the demo load stops)")
    args = parser.parse_args()
    stack = Stack(args.dir)
    for app in args.without:
        stack.part(app).stop()
    if args.without:
        time.sleep(args.settle)
    cores = measure(stack, args.seconds)
    for name, used in cores.items():
        print(f"{name:16} {used:6.3f} core")
    print(f"{'all':16} {sum(cores.values()):6.3f} core over {args.seconds:.0f} s")


if __name__ == "__main__":
    main()
