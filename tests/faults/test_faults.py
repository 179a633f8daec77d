"""The fault suite (`make test-faults`; CI runs it too, shorter): the whole appliance on the demo
shop under a sustained write load, while capture and every materializer are killed with
`kill -9` at random moments, PostgreSQL is restarted, the broker is restarted gracefully and the
registry is stopped for a while. A supervisor restarts whatever died. Once the load ends, every
view must equal the source: nothing committed is missing. Prints a report of the load held, the
faults injected, the duplicates seen and the losses.

Environment: BOTTLER_FAULT_SECONDS (load duration, default 40), BOTTLER_FAULT_RATE (load
transactions per second, default 30), BOTTLER_FAULT_SEED (the faults' order and timing),
BOTTLER_FAULT_LOGS (where the stack's logs are kept, in ``bottler-faults-<seed>/``),
BOTTLER_FAULT_BROKER_RESTART=1 (restart the broker too; `make test-faults` sets it).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

from compose.load import run_load
from compose.stack import isolated_stack
from tests.faults import views
from tests.faults.appliance import Faults, Supervisor, inject

DURATION = float(os.environ.get("BOTTLER_FAULT_SECONDS", "40"))
RATE = float(os.environ.get("BOTTLER_FAULT_RATE", "30"))
SEED = int(os.environ.get("BOTTLER_FAULT_SEED", str(random.randrange(10**6))))
# kill -9s of the broker under load (`make test-faults` asks for more); nothing acknowledged
# may be lost: Kafka's log is on disk (the page cache) before it acknowledges
BROKER_KILLS = int(os.environ.get("BOTTLER_FAULT_BROKER_KILLS", "2"))
APPS = ("capture", "replica", "search", "warehouse", "translator")
SHOP_TOPICS = ["customers", "products", "orders", "order_items"]
CONVERGE_SECONDS = 180
LOGS = Path(os.environ.get("BOTTLER_FAULT_LOGS", tempfile.gettempdir())) / f"bottler-faults-{SEED}"


def converge(stack, deadline: float) -> list[views.ViewCheck]:
    """Check every view until all equal the source or the deadline passes; the last checks."""
    while True:
        try:
            checks = [check(stack) for name, check in views.VIEWS.items() if name in stack.apps]
        except KafkaException:  # the broker is still coming back from a late kill (busy cores)
            if time.monotonic() > deadline:
                raise
            time.sleep(3)
            continue
        if all(c.equal for c in checks) or time.monotonic() > deadline:
            return checks
        time.sleep(3)


@pytest.mark.stack  # the appliance on a stack of its own
@pytest.mark.faults
@pytest.mark.timeout(DURATION * 2 + CONVERGE_SECONDS + 240)  # start-up, faults overrunning
def test_every_view_equals_the_source_after_faults_under_load(capsys):
    rng = random.Random(SEED)
    with isolated_stack() as stack:
        stack.up(apps=APPS, demo=True)
        supervisor = Supervisor(stack)
        supervisor.start()
        stop = threading.Event()
        held: dict[str, int] = {}
        load = threading.Thread(
            target=lambda: held.update(run_load(stack.endpoints.pg_dsn, RATE, stop, DURATION,
                                                seed=SEED)), daemon=True)
        started = time.monotonic()
        load.start()
        try:
            done = inject(Faults(stack, supervisor).schedule(DURATION * 0.9, rng,
                                                             BROKER_KILLS), started, stop)
            load.join(DURATION + 60)
            loaded = time.monotonic() - started
            checks = converge(stack, time.monotonic() + CONVERGE_SECONDS)
            converged = time.monotonic() - started - loaded
        finally:
            stop.set()
            supervisor.stop()
            shutil.copytree(stack.root / "logs", LOGS, dirs_exist_ok=True)
        dupes = views.duplicates(stack, SHOP_TOPICS)
        if not all(c.equal for c in checks):
            for c in checks:
                c.detail += views.whereabouts(stack, c)

    commits = sum(held.values())
    report = [
        f"fault suite, seed {SEED}: {commits:,} transactions in {loaded:.0f} s"
        f" ({commits / loaded:.1f}/s, asked {RATE:g}/s for {DURATION:g} s): "
        + ", ".join(f"{a} {n}" for a, n in sorted(held.items())),
        f"faults injected ({len(done)}): "
        + "; ".join(f"{f.at:.0f} s {f.name} ({f.seconds:.1f} s)" for f in done),
        "restarts by the supervisor: "
        + (", ".join(f"{a} {n}" for a, n in sorted(supervisor.restarts.items())) or "none"),
        f"duplicates seen in the table topics: {dupes}",
        f"views equal to the source {converged:.0f} s after the load ended:",
        *(f"  {c.view}: missing {c.missing}, different {c.different}, extra {c.extra}"
          f"{' ' + c.detail if c.detail else ''}" for c in checks),
        f"losses: {sum(c.missing for c in checks)}; the stack's logs are in {LOGS}",
    ]
    with capsys.disabled():
        print("\n" + "\n".join(report))
    assert len(done) == len(APPS) * 2 + BROKER_KILLS + 3, "every fault was injected"
    assert commits > RATE * DURATION * 0.5, "the load held"
    assert all(c.equal for c in checks), "\n".join(report)
