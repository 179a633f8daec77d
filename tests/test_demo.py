"""The demo shop that `make up` seeds."""

import psycopg
import pytest

from common.errors import BottlerError
from compose.demo import ROWS, seed


@pytest.fixture(scope="module")
def shop(stack):
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute("drop database if exists demo_probe")
        conn.execute("create database demo_probe")
    return stack.pg_dsn.rsplit("/", 1)[0] + "/demo_probe"


def test_seed_fills_every_table_and_is_idempotent(shop):
    first = seed(shop)
    assert set(first) == {"customers", "products", "orders", "order_items"}
    assert all(n > 0 for n in first.values())
    assert sum(first.values()) == ROWS
    assert seed(shop) == first


def test_a_scaled_shop_has_the_same_shape_times_the_scale(stack):
    """The peers bench's shop (tests/bench/peers_capture.py): every table ``scale`` times."""
    with psycopg.connect(stack.pg_dsn, autocommit=True) as conn:
        conn.execute("drop database if exists demo_scaled")
        conn.execute("create database demo_scaled")
    scaled = seed(stack.pg_dsn.rsplit("/", 1)[0] + "/demo_scaled", scale=3)
    assert scaled == {"customers": 3000, "products": 600, "orders": 15000,
                      "order_items": 30_000}


def test_shop_has_foreign_keys_and_the_promised_types(shop):
    seed(shop)
    with psycopg.connect(shop) as conn:
        fks = conn.execute(
            "select count(*) from pg_constraint where contype = 'f'"
        ).fetchone()[0]
        types = {r[0] for r in conn.execute(
            "select distinct data_type from information_schema.columns "
            "where table_schema = 'public'"
        )}
        toasted = conn.execute(
            "select count(*) from products where pg_column_size(description) > 8000"
        ).fetchone()[0]
    assert fks >= 3
    assert {"text", "numeric", "jsonb", "timestamp with time zone"} <= types
    assert toasted > 0  # a large column stored out of line


def test_seed_reports_an_unreachable_database_without_the_password():
    with pytest.raises(BottlerError) as info:
        seed("postgresql://demo:hunter2@127.0.0.1:1/shop")
    assert "hunter2" not in str(info.value)
    assert "cannot connect" in str(info.value)
