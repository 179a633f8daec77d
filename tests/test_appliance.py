"""What `make up` runs: the stack, the demo shop under a gentle write load, the capture streaming
it into Kafka, and every view: the replica in a second database, the Delta warehouse, the
business events, the search index; and every process of it listening on loopback only (the
other listeners' tests are in tests/test_exposure.py)."""

from __future__ import annotations

import httpx
import psycopg
import pytest

from compose.stack import isolated_stack
from tests.support.databases import execute, rows
from tests.support.listeners import listeners, stack_processes
from tests.support.own_stack import Tracker
from tests.support.topics import Decoder, read_topic
from tests.support.waiting import wait_for

pytestmark = pytest.mark.stack  # the appliance on a stack of its own


def metric(url: str, name: str) -> float | None:
    for line in httpx.get(url).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def warehouse_paid(stack) -> int | None:
    """Paid orders in the warehouse's Delta table (None before it exists)."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        table = DeltaTable(str(stack.root / "warehouse" / "public" / "orders"))
    except TableNotFoundError:
        return None
    statuses = table.to_pyarrow_table(columns=["status"])["status"].to_pylist()
    return sum(status == "paid" for status in statuses)


def search_status(url: str, order: int) -> str | None:
    """The order's status as the search alias ``shop`` serves it."""
    answer = httpx.get(f"{url}/shop/_doc/public.orders:{order}")
    return answer.json()["_source"].get("status") if answer.status_code == 200 else None


def order_events(stack) -> dict[int, list[str]]:
    from tests.support.stack import RunningStack
    from tests.support.translate import Events

    return Events(RunningStack(stack), "order-events").by_order()


@pytest.mark.timeout(600)
def test_the_appliance_runs_every_view_follows_and_nothing_listens_beyond_loopback():
    """…and `down` of the running stack leaves no process (tests/test_stack_stops.py stops it
    at moments of its start)."""
    with isolated_stack() as stack, Tracker(stack.root, interval=1.0) as tracker:
        outcome = stack.up(apps=stack.APPS, demo=True)
        assert {outcome[app] for app in stack.APPS} == {"started"}
        ep = stack.endpoints
        decoder = Decoder(ep.registry)

        def orders():
            try:
                return decoder.table_state(read_topic(ep.kafka, "orders"))
            except KeyError:
                return None

        state = wait_for(lambda: (s := orders()) and len(s) >= 5000 and s, 60, "5000 orders")
        assert {v["status"] for v in state.values()} == {"placed", "paid", "shipped", "cancelled"}
        load_url = f"http://127.0.0.1:{stack.ports.load_metrics}/metrics"
        wait_for(lambda: metric(load_url, "bottler_load_transactions_total"), 30, "the load")
        stack.part("load").stop()  # the views are compared with a source at rest

        metrics_url = f"http://127.0.0.1:{stack.ports.metrics}/metrics"
        wait_for(lambda: metric(metrics_url, "bottler_capture_snapshot_complete") == 1.0, 30,
                 "the snapshot to be recorded complete")
        order = rows(ep.pg_dsn, "insert into orders (customer_id) values (1) returning id")[0][0]
        execute(ep.pg_dsn, f"update orders set status = 'paid' where id = {order}")
        wait_for(lambda: metric(metrics_url, "bottler_capture_confirmed_lsn") > 0, 30,
                 "a confirmed position")

        replica = stack.postgres.dsn("replica")

        def replica_rows(query: str):
            try:
                return rows(replica, query)
            except psycopg.errors.UndefinedTable:  # not created by the replica yet
                return None

        wait_for(lambda: replica_rows(f"select status from orders where id = {order}")
                 == [("paid",)], 60, "the replica")
        count = "select count(*), sum(total) from orders"
        wait_for(lambda: replica_rows(count) == rows(ep.pg_dsn, count), 30, "all orders")
        paid = "select count(*) from orders where status = 'paid'"
        wait_for(lambda: warehouse_paid(stack) == rows(ep.pg_dsn, paid)[0][0], 120,
                 "the warehouse's paid orders to match the source's")
        wait_for(lambda: order_events(stack).get(order) == ["OrderPlaced", "OrderPaid"], 60,
                 "the order's business events")
        wait_for(lambda: search_status(ep.search, order) == "paid", 60, "the search index")

        # each listening socket of each process of the stack, whatever process it is (Spark's
        # driver JVM and its Python workers included: the warehouse wrote), binds to loopback
        found = listeners(stack_processes(stack))
        commands = " ".join(listener.command for listener in found)
        assert "java" in commands and "postgres" in commands, found  # Spark's JVM is seen
        exposed = [str(listener) for listener in found if not listener.loopback]
        assert exposed == [], "listening beyond loopback:\n" + "\n".join(exposed)

        again = stack.up()  # the apps are remembered
        assert again["capture"] == again["replica"] == "already running"
        stack.down()
        assert tracker.alive() == []
        log = (stack.root / "logs" / "capture.log").read_text()
        assert "capture stopped; confirmed up to" in log  # a graceful stop, not a kill
