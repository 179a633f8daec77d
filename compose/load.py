"""A gentle, realistic write load on the demo shop: orders placed, paid, shipped or cancelled,
prices changed, customers signing up, now and then an order deleted. `make up` runs it so every
view has something to follow; the fault suite runs it harder.

Each step is one transaction of one business action, paced to ``rate`` transactions per second.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

import psycopg
from prometheus_client import Counter

from common.errors import BottlerError
from common.pg import connect

log = logging.getLogger(__name__)

TRANSACTIONS = Counter("bottler_load_transactions", "Demo load transactions committed", ["action"])
ERRORS = Counter("bottler_load_errors", "Demo load transactions that failed (and were retried)")


def place_order(conn: psycopg.Connection, rng: random.Random) -> None:
    customer = conn.execute("select id from customers order by random() limit 1").fetchone()
    order_id = conn.execute(
        "insert into orders (customer_id) values (%s) returning id", customer).fetchone()[0]
    for line_no in range(1, rng.randint(1, 3) + 1):
        conn.execute(
            "insert into order_items (order_id, line_no, product_id, quantity, unit_price)"
            " select %s, %s, id, %s, price from products order by random() limit 1",
            (order_id, line_no, rng.randint(1, 3)))
    conn.execute("update orders set total = (select sum(quantity * unit_price) from order_items"
                 " where order_id = %s) where id = %s", (order_id, order_id))


# Orders move along their lifecycle oldest first, one at a time.
def pay_order(conn: psycopg.Connection, rng: random.Random) -> None:
    conn.execute("update orders set status = 'paid', paid_at = now() where id = (select id from"
                   " orders where status = 'placed' order by id limit 1 for update skip locked)")


def ship_order(conn: psycopg.Connection, rng: random.Random) -> None:
    conn.execute("update orders set status = 'shipped', shipped_at = now() where id = (select id"
                   " from orders where status = 'paid' order by id limit 1"
                   " for update skip locked)")


def cancel_order(conn: psycopg.Connection, rng: random.Random) -> None:
    conn.execute("update orders set status = 'cancelled' where id = (select id from orders"
                   " where status = 'placed' order by id desc limit 1 for update skip locked)")


def annotate_order(conn: psycopg.Connection, rng: random.Random) -> None:
    """A technical change of no business interest (a note)."""
    conn.execute("update orders set note = %s where id = (select id from orders"
                 " order by random() limit 1)", (f"note {rng.randint(1, 1000)}",))


def change_price(conn: psycopg.Connection, rng: random.Random) -> None:
    conn.execute("update products set price = round((price * %s)::numeric, 2), updated_at = now()"
                 " where id = (select id from products order by random() limit 1)",
                 (rng.choice((0.9, 0.95, 1.05, 1.1)),))


def sign_up(conn: psycopg.Connection, rng: random.Random) -> None:
    n = rng.randint(10**6, 10**9)
    conn.execute("insert into customers (email, full_name, country) values (%s, %s, %s)"
                 " on conflict (email) do nothing",
                 (f"new{n}@example.com", f"New Customer {n}", rng.choice(("DE", "FR", "US"))))


def delete_order(conn: psycopg.Connection, rng: random.Random) -> None:
    """Cascades to its items: deletes in two topics."""
    conn.execute("delete from orders where id = (select id from orders where status = 'cancelled'"
                 " order by id limit 1)")


ACTIONS: list[tuple[Callable[[psycopg.Connection, random.Random], None], int]] = [
    (place_order, 30), (pay_order, 20), (ship_order, 15), (cancel_order, 5),
    (annotate_order, 10), (change_price, 10), (sign_up, 8), (delete_order, 2),
]


def run_load(dsn: str, rate: float, stop: threading.Event, duration: float | None = None,
             seed: int | None = None) -> dict[str, int]:
    """Run actions at ``rate`` transactions per second until ``stop`` is set (or ``duration``
    seconds passed); return the count of committed transactions per action. A failed
    transaction (the server restarting, a conflict) is counted, logged and retried with a new
    connection: the load holds through faults."""
    rng = random.Random(seed)
    actions, weights = zip(*ACTIONS, strict=True)
    done: dict[str, int] = {}
    end = None if duration is None else time.monotonic() + duration
    interval = 1.0 / rate
    next_at = time.monotonic()
    conn: psycopg.Connection | None = connect(dsn)  # a wrong DSN fails here, at once
    try:
        while not stop.is_set() and (end is None or time.monotonic() < end):
            action = rng.choices(actions, weights)[0]
            try:
                if conn is None or conn.closed:
                    conn = connect(dsn)
                with conn.transaction():
                    action(conn, rng)
                done[action.__name__] = done.get(action.__name__, 0) + 1
                TRANSACTIONS.labels(action.__name__).inc()
            except (psycopg.Error, BottlerError) as exc:  # e.g. the server restarting
                ERRORS.inc()
                log.warning("load: %s failed (%s); retrying", action.__name__,
                            type(exc).__name__)
                if conn is not None:
                    conn.close()
                conn = None
                stop.wait(0.5)
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                stop.wait(delay)
            else:
                next_at = time.monotonic()  # behind: do not burst to catch up
    finally:
        if conn is not None:
            conn.close()
    return done
