"""The demo shop's shape for the peers bench's capture against capture
(tests/bench/peers_capture.py): compose/demo_shop.sql's four related tables (customers,
products with TOASTed descriptions, orders, order_items; text, numeric, jsonb, timestamps, a
composite key), scaled in SQL to about as many rows in all as the bench's table; its catch-up
inserts every table's rows once more, in one transaction."""

from __future__ import annotations

import psycopg

from compose import demo
from tests.bench.peers_capture import Shape

# Each table's rows once more, their ids (and references) past the last ones, the unique
# columns made unique again: as many rows as the shop holds, in one transaction.
AGAIN = (
    "insert into customers (id, email, full_name, country, preferences, created_at) "
    "select id + %(c)s, 'again-' || email, full_name, country, preferences, created_at "
    "from customers",
    "insert into products (id, sku, name, price, attributes, description, in_stock, updated_at) "
    "select id + %(p)s, sku || '-2', name, price, attributes, description, in_stock, updated_at "
    "from products",
    "insert into orders (id, customer_id, status, total, placed_at, paid_at, shipped_at, note) "
    "select id + %(o)s, customer_id + %(c)s, status, total, placed_at, paid_at, shipped_at, note "
    "from orders",
    "insert into order_items (order_id, line_no, product_id, quantity, unit_price) "
    "select order_id + %(o)s, line_no, product_id + %(p)s, quantity, unit_price "
    "from order_items",
)


def scale(rows: int) -> int:
    """The demo shop's scale that holds about ``rows`` rows in all (at least the demo's)."""
    return max(1, round(rows / demo.ROWS))


def shop(dsn: str, rows: int) -> Shape:
    """The demo shop filled in ``dsn`` to about ``rows`` rows (and vacuumed, as the bench's
    table), as a Shape."""
    counts = demo.seed(dsn, scale(rows))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("vacuum analyze " + ", ".join(demo.TABLES))
    return Shape("peers_shop", "shop: ", demo.TABLES, sum(counts.values()), again)


def again(dsn: str) -> None:
    """Every table's rows once more, in one transaction (once: the ids go past the last)."""
    with psycopg.connect(dsn) as conn, conn.transaction():
        c, p, o = conn.execute("select (select max(id) from customers), "
                               "(select max(id) from products), "
                               "(select max(id) from orders)").fetchone()
        for insert in AGAIN:
            conn.execute(insert, {"c": c, "p": p, "o": o})
