"""`bottler status` against what `make up` runs, and the Grafana dashboard's queries against
the metrics the code exports."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from capture.health.slot_safety import SlotProbe
from compose.stack import isolated_stack
from tests.support.cli import bottler, cells
from tests.support.databases import rows
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "compose" / "grafana" / "bottler-dashboard.json"
PROMETHEUS = ROOT / "compose" / "prometheus.yml"
METRIC_MODULES = [ROOT / "capture" / "health" / "metrics.py",
                  ROOT / "materializers" / "core" / "metrics.py"]
TABLES = ("customers", "products", "orders", "order_items")


def status(*args: str) -> subprocess.CompletedProcess:
    return bottler("status", "--once", *args, clean=False)


def until(args: tuple[str, ...], ready, timeout: float, what: str) -> str:
    deadline = time.monotonic() + timeout
    while True:
        output = status(*args).stdout
        if ready(output):
            return output
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last view:\n{output}")
        time.sleep(0.5)


@pytest.mark.stack  # the demo on a stack of its own
def test_status_shows_the_slot_the_topics_and_each_process():
    with isolated_stack() as stack:
        stack.up(apps=("capture", "replica"), demo=True)
        source = stack.endpoints.pg_dsn
        counts = {t: rows(source, f"select count(*) from {t}")[0][0] for t in TABLES}
        at_stack = ("--dir", str(stack.root))

        def replica_done(out: str) -> bool:
            replica, capture = cells(out, "replica"), cells(out, "capture")
            return (replica is not None and replica[2] == "caught up"
                    and capture is not None and capture[2] == "streaming"
                    and all(cells(out, t) == [t, "1", f"{n:,}", "0"] for t, n in counts.items()))

        out = until(at_stack, replica_done, 60, "the replica to catch up on every table")
        slot = cells(out, "bottler")
        assert slot[:3] == ["bottler", "shop", "yes"]
        assert re.fullmatch(r"[\d.,]+ (B|KiB|MiB|GiB)", slot[3]), slot  # retained WAL
        assert cells(out, "capture")[1:3] == ["capture", "streaming"]
        assert cells(out, "replica")[1:4] == ["bottler-postgres", "caught up", "0 messages"]
        assert stack.password not in out
        assert status(*at_stack).returncode == 0

        # The same deployment, its endpoints given by hand (as for Docker users).
        urls = stack.metrics_urls()
        by_hand = status("--postgres", source, "--broker", stack.endpoints.kafka,
                         "--metrics", f"capture={urls['capture']}", "--metrics", urls["replica"])
        assert by_hand.returncode == 0, by_hand.stdout + by_hand.stderr
        replica_port = urls["replica"].split(":")[2].split("/")[0]
        assert cells(by_hand.stdout, f"127.0.0.1:{replica_port}")[2] == "caught up"
        assert cells(by_hand.stdout, "orders")[2] == f"{counts['orders']:,}"

        # The capture can export its slot's retained WAL too (one query per scrape).
        assert SlotProbe(source, "bottler").retained_wal() > 0
        assert math.isnan(SlotProbe(source, "no_such_slot").retained_wal())

        # A materializer gone for good: its supervisor killed (it takes its process along; a
        # process that fails alone is restarted: tests/test_stack_supervision.py).
        os.kill(stack.status()["replica"], signal.SIGKILL)
        wait_for(lambda: stack.status()["replica"] is None, 10, "the replica to be gone")
        down = status(*at_stack)
        assert down.returncode == 1
        replica = cells(down.stdout, "replica")
        assert replica[2] == "down" and "not running" in replica[-1], down.stdout
        assert cells(down.stdout, "capture")[2] == "streaming"

    # A source that does not answer is reported, its password masked, and fails the check.
    gone = status("--postgres", "postgresql://bottler:s3cret@127.0.0.1:9/shop",
                  "--metrics", "http://127.0.0.1:9/metrics")
    assert gone.returncode == 1
    assert "s3cret" not in gone.stdout + gone.stderr
    assert "unavailable: PostgreSQL at postgresql://bottler:***@127.0.0.1:9/shop" in gone.stdout


def test_the_demo_load_shows_as_running_with_its_transactions():
    from prometheus_client import start_http_server

    from compose.load import TRANSACTIONS
    from compose.procs import free_port

    port = free_port()
    start_http_server(port, addr="127.0.0.1")  # this process's registry holds the load's counter
    TRANSACTIONS.labels("place_order").inc(3)
    out = status("--metrics", f"load=http://127.0.0.1:{port}/metrics")
    assert out.returncode == 0, out.stdout + out.stderr
    # the row of its part "load" (this test process exports the capture's gauges too)
    row = next(r for line in out.stdout.splitlines()
               if len(r := [c.strip() for c in line.split("│")]) > 4 and r[1] == "load")
    assert row[:4] == ["load", "load", "running", ""], out.stdout
    done = re.fullmatch(r"([\d,]+) transactions", row[4])
    assert done and int(done.group(1).replace(",", "")) >= 3, out.stdout


# -- the Grafana dashboard and the Prometheus configuration for Docker users -----------------

def exported_metrics() -> set[str]:
    """The series names the code exports, from the metrics modules' source: a counter `x`
    is exposed as `x_total` (prometheus_client adds the suffix unless it is there)."""
    names = set()
    for module in METRIC_MODULES:
        for kind, name in re.findall(r'\b(Counter|Gauge)\(\s*"(bottler_\w+)"', module.read_text()):
            counter = kind == "Counter" and not name.endswith("_total")
            names.add(f"{name}_total" if counter else name)
    return names


def test_dashboard_queries_only_metrics_the_code_exports():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queried = {m for e in exprs for m in re.findall(r"\bbottler_\w+", e)}
    exported = exported_metrics()
    assert "bottler_materializer_caught_up" in exported  # the extraction works
    assert queried and queried <= exported, queried - exported
    titles = {p["title"] for p in dashboard["panels"]}
    for wanted in ("Capture events", "Capture lag", "Retained WAL", "Materializer lag",
                   "Materializers caught up", "Dead letters"):
        assert wanted in titles
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_prometheus_scrapes_every_app_with_an_app_label():
    config = yaml.safe_load(PROMETHEUS.read_text())
    (job,) = config["scrape_configs"]
    apps = {c["labels"]["app"]: c["targets"] for c in job["static_configs"]}
    assert {"capture", "replica"} <= set(apps)
    for app, targets in apps.items():
        assert targets == [f"{app}:9100"]


def test_failover_and_synced_columns_show_where_the_server_has_them():
    """PostgreSQL 17+ says whether a slot is a failover slot and, on a standby, whether it is
    the synchronized copy of the primary's; older servers show no such columns."""
    from rich.console import Console

    from bottler.status.figures import Slot, Snapshot
    from bottler.status.view import render

    def drawn(*slots: Slot) -> str:
        console = Console(width=160, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(render(Snapshot("t", slots=list(slots))))
        return console.export_text()

    new = drawn(Slot("bottler", "shop", False, 10, 0, "reserved", True, True),
                Slot("other", "shop", True, 10, 0, "reserved", False, False))
    assert cells(new, "bottler")[-2:] == ["yes", "yes"]
    assert cells(new, "other")[-2:] == ["no", "no"]
    old = drawn(Slot("bottler", "shop", True, 10, 0, "reserved"))
    assert "synced" not in old and cells(old, "bottler")[-1] == "reserved"
