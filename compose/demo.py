"""Seed the demo shop database that `make up` replicates."""

from __future__ import annotations

from importlib import resources

import psycopg

from common.errors import BottlerError
from common.pg import connect

TABLES = ("customers", "products", "orders", "order_items")


ROWS = 16_201  # the shop's rows in all, at scale 1


def seed(dsn: str, scale: int = 1) -> dict[str, int]:
    """Create and fill the shop's tables (only the empty ones are filled), ``scale`` times the
    demo's rows (the peers bench's shape); return row counts."""
    script = resources.files("compose").joinpath("demo_shop.sql").read_text()
    with connect(dsn) as conn:
        try:
            with conn.transaction():
                conn.execute("select set_config('bottler.demo_scale', %s, true)", (str(scale),))
                conn.execute(script)
        except psycopg.Error as exc:
            raise BottlerError(f"seeding the demo shop failed: {exc}") from None
        return {t: conn.execute(f"select count(*) from {t}").fetchone()[0] for t in TABLES}
