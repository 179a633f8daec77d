"""The demo write load: business actions on the demo shop, paced, surviving a failed action."""

from __future__ import annotations

import threading

from compose.demo import seed
from compose.load import run_load
from tests.support.databases import rows


def test_load_runs_paced_business_actions_on_the_shop(stack, source):
    seed(source)
    before = dict(rows(source, "select status, count(*) from orders group by status"))
    done = run_load(source, rate=100, stop=threading.Event(), duration=2.0, seed=7)
    total = sum(done.values())
    # paced: never past 100/s (a busy machine may give fewer; the bench measures the rate)
    assert 0 < total <= 210
    assert {"place_order", "pay_order", "ship_order"} <= done.keys()
    after = dict(rows(source, "select status, count(*) from orders group by status"))
    assert sum(after.values()) > sum(before.values()) - done.get("delete_order", 0)
    assert rows(source, "select count(*) from orders o where total <> (select coalesce("
                "sum(quantity * unit_price), 0) from order_items where order_id = o.id)"
                " and id > 5000") == [(0,)]  # new orders' totals match their items
