"""The benchmark's data: tables of ~100 B rows (int key, two 32-character texts, a timestamptz;
104 B by pg_column_size), filled server-side so the client costs nothing."""

from __future__ import annotations

import time

import psycopg
from psycopg import sql


def drop_table(dsn: str, table: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("drop table if exists {} cascade").format(sql.Identifier(table)))


def create_table(dsn: str, table: str) -> None:
    drop_table(dsn, table)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "create table {} (id int primary key, a text not null, b text not null, "
            "t timestamptz not null)"
        ).format(sql.Identifier(table)))


def fill(dsn: str, table: str, first: int, rows: int, transactions: int = 1) -> tuple[float, int]:
    """Insert ids ``first .. first+rows-1`` in ``transactions`` transactions; return the
    monotonic time the first transaction committed and the WAL position after the last one."""
    per = -(-rows // transactions)
    first_commit = None
    insert = sql.SQL(
        "insert into {} select g, md5(g::text), md5((g * 2)::text), now() "
        "from generate_series(%s::int, %s::int) g"
    ).format(sql.Identifier(table))
    with psycopg.connect(dsn, autocommit=True) as conn:
        for lo in range(first, first + rows, per):
            hi = min(lo + per, first + rows) - 1
            conn.execute(insert, (lo, hi))  # autocommit: one transaction per statement
            first_commit = first_commit or time.monotonic()
        return first_commit, current_lsn(conn)


def count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(sql.SQL("select count(*) from {}").format(
            sql.Identifier(table))).fetchone()[0]


def current_lsn(conn: psycopg.Connection) -> int:
    return int(conn.execute("select pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def confirmed_lsn(conn: psycopg.Connection, slot: str) -> int | None:
    row = conn.execute(
        "select confirmed_flush_lsn - '0/0'::pg_lsn from pg_replication_slots "
        "where slot_name = %s", (slot,)
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def vacuum(dsn: str, table: str) -> None:
    """Set hint bits and the visibility map, so a COPY reads the table as a snapshot would."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("vacuum analyze {}").format(sql.Identifier(table)))


def create_filled(dsn: str, table: str, rows: int) -> None:
    """A table of ``rows`` rows filled in one statement, its primary key built after (a sorted
    build, not an index insert per row: seconds per 10M rows saved), vacuumed."""
    drop_table(dsn, table)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL(
            "create table {} (id int not null, a text not null, b text not null, "
            "t timestamptz not null)").format(sql.Identifier(table)))
        conn.execute(sql.SQL(
            "insert into {} select g, md5(g::text), md5((g * 2)::text), now() "
            "from generate_series(1, %s::int) g").format(sql.Identifier(table)), (rows,))
        conn.execute(sql.SQL("alter table {} add primary key (id)").format(
            sql.Identifier(table)))
    vacuum(dsn, table)
