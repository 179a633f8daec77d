"""The tables a seed copies: what it knows of each, whether a target table holds rows already,
and a target table's primary key, put off until its rows are in."""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from materializers.core.changes import TableId
from materializers.postgres.ddl import qualified, quote


@dataclass
class SeedTable:
    """A table to copy: its topic, its columns, its page ranges still to copy and its rows."""

    topic: str
    id: TableId
    columns: list[str] = field(default_factory=list)
    chunks: int = 0  # ranges not copied yet
    ranges: int = 0
    binary: bool = False  # COPY in binary format (see Seeder._prepare)
    deferred_key: list[str] | None = None  # primary key columns, dropped until the copy ends
    rows: int = 0
    failed: str | None = None


def holds_rows(conn: psycopg.Connection, table: TableId) -> bool:
    exists = conn.execute("select to_regclass(%s)", (qualified(table),)).fetchone()[0]
    held = exists is not None and conn.execute(
        f"select exists (select from {qualified(table)})").fetchone()[0]
    conn.rollback()
    return held


# The primary key of a table the seed created is built after its rows are in (as pg_dump
# does: data, then post-data): one sorted index build instead of an insert per row, about a
# quarter faster. Only a table the replica created (not adopted: the user's keys and indexes
# stay as they are); a copy interrupted meanwhile leaves it without its key, which the next
# start puts back (on the emptied table) before anything else looks at it.

def _own(conn: psycopg.Connection, table: TableId) -> bool:
    """Whether the replica created the table (recorded, not adopted)."""
    row = conn.execute("select adopted from bottler.replica_tables"
                       " where schema_name = %s and table_name = %s",
                       (table.schema, table.table)).fetchone()
    return row is not None and not row[0]


def _key_of(conn: psycopg.Connection, table: TableId) -> tuple[str, list[str]] | None:
    """The table's primary key constraint: its name and columns in key order."""
    return conn.execute(
        "select c.conname::text, array_agg(a.attname::text order by k.ord)"
        " from pg_constraint c cross join unnest(c.conkey) with ordinality k(attnum, ord)"
        " join pg_attribute a on a.attrelid = c.conrelid and a.attnum = k.attnum"
        " where c.conrelid = to_regclass(%s) and c.contype = 'p' group by c.conname",
        (qualified(table),)).fetchone()


def defer_key(conn: psycopg.Connection, table: TableId) -> list[str] | None:
    """Drops the primary key of an empty table the replica created; its columns, to add it
    back after the copy (under the same, default name)."""
    if not _own(conn, table) or (key := _key_of(conn, table)) is None:
        return None
    name, columns = key
    conn.execute(f"alter table {qualified(table)} drop constraint {quote(name)}")
    return columns


def add_key(conn: psycopg.Connection, table: TableId, columns: list[str]) -> None:
    conn.execute(f"alter table {qualified(table)} add primary key"
                 f" ({', '.join(quote(c) for c in columns)})")


def restore_key(conn: psycopg.Connection, table: TableId, columns: list[str]) -> None:
    """A table the replica created, left without its primary key by a copy that did not end:
    emptied (it is copied again) and given its key back."""
    exists = conn.execute("select to_regclass(%s)", (qualified(table),)).fetchone()[0]
    if exists is not None and _own(conn, table) and _key_of(conn, table) is None:
        conn.execute(f"truncate {qualified(table)}")
        add_key(conn, table, columns)
    conn.commit()
