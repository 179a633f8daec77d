"""What `make up` runs: the stack, the demo shop, the capture streaming it into Kafka, and the
replica in a second database."""

from __future__ import annotations

import httpx
import psycopg

from compose.stack import isolated_stack
from tests.support import Decoder, execute, read_topic, rows, wait_for


def metric(url: str, name: str) -> float | None:
    for line in httpx.get(url).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_demo_shop_is_captured_and_watched():
    with isolated_stack() as stack:
        outcome = stack.up(apps=("capture", "replica"), demo=True)
        assert outcome["capture"] == outcome["replica"] == "started"
        ep = stack.endpoints
        decoder = Decoder(ep.registry)

        def orders():
            try:
                return decoder.table_state(read_topic(ep.kafka, "orders"))
            except KeyError:
                return None

        state = wait_for(lambda: (s := orders()) and len(s) == 5000 and s, 60, "5000 orders")
        assert {v["status"] for v in state.values()} == {"placed", "paid", "shipped", "cancelled"}

        metrics_url = f"http://127.0.0.1:{stack.ports.metrics}/metrics"
        wait_for(lambda: metric(metrics_url, "bottler_capture_snapshot_complete") == 1.0, 30,
                 "the snapshot to be recorded complete")
        execute(ep.pg_dsn, "update orders set status = 'paid' where id = 1")
        wait_for(lambda: metric(metrics_url, "bottler_capture_events_total"), 30, "an event")
        wait_for(lambda: metric(metrics_url, "bottler_capture_confirmed_lsn") > 0, 30,
                 "a confirmed position (after the stack's 5 s --confirm-delay)")

        replica = stack.postgres.dsn("replica")

        def replica_rows(query: str):
            try:
                return rows(replica, query)
            except psycopg.errors.UndefinedTable:  # not created by the replica yet
                return None

        order_1 = "select status from orders where id = 1"
        wait_for(lambda: replica_rows(order_1) == [("paid",)], 60, "the replica")
        count = "select count(*), sum(total) from orders"
        wait_for(lambda: replica_rows(count) == rows(ep.pg_dsn, count), 30, "all orders")

        again = stack.up()  # the apps are remembered
        assert again["capture"] == again["replica"] == "already running"
        stack.down()
        log = (stack.root / "logs" / "capture.log").read_text()
        assert "capture stopped; confirmed up to" in log  # a graceful stop, not a kill
