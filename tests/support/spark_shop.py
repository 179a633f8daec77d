"""The spark route's tests' source tables (tests/test_warehouse_spark_route.py, and over Spark
Connect tests/test_warehouse_connect.py): the shop, a load of changes on it, and both sides read
for comparison (the source with psycopg, the Delta tables with delta-rs, the independent
reader)."""

from __future__ import annotations

from pathlib import Path

from materializers.warehouse.delta import open_table

SHOP = """
create table items (id int primary key, name text, price numeric(10,2), at timestamptz,
                    day date);
insert into items select g, 'item ' || g, g / 4.0,
                         '2024-06-01 12:00+02'::timestamptz + g * '1h'::interval,
                         '2024-01-01'::date + g
  from generate_series(1, 300) g;
create table log (at int, what text);
insert into log select g, 'line ' || g from generate_series(1, 40) g;
"""
LOAD = [
    *[f"update items set name = 'n{i}', price = {i} where id = {i % 7 + 1}" for i in range(60)],
    "delete from items where id between 100 and 150",
    "insert into log values (41, 'more'), (41, 'more')",
    "insert into items values (1000, 'new', 1, '-infinity', 'infinity')",
    "delete from items where id = 2",
    "insert into items (id, name) values (2, 'again')",
]
CLAMPED = ("case when at = '-infinity' then '0001-01-01 00:00+00' when at = 'infinity' then "
           "'9999-12-31 23:59:59.999999+00' else at end as at, case when day = '-infinity' then "
           "'0001-01-01' when day = 'infinity' then '9999-12-31' else day end as day")
QUERIES = {"items": f"select id, name, price, {CLAMPED} from items",
           "log": "select at, what from log"}
COLUMNS = {"items": ["id", "name", "price", "at", "day"], "log": ["at", "what"]}


def source_rows(dsn: str, table: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        conn.execute("set timezone = 'UTC'")
        return sorted(conn.execute(QUERIES[table]).fetchall(), key=repr)


def delta_rows(root: Path, table: str) -> list[tuple]:
    delta = open_table(root / "public" / table)
    if delta is None:
        return []
    rows = delta.to_pyarrow_table(columns=COLUMNS[table]).to_pylist()
    return sorted((tuple(r[c] for c in COLUMNS[table]) for r in rows), key=repr)
