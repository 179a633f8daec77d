"""What the migration tools read of a database's catalog: its user tables, their columns and
primary keys, the collation their key columns sort by."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from common.errors import BottlerError

# Schemas that are never a user's data: the system's, and the replica's own (bottler.offsets).
SYSTEM_SCHEMAS = ("pg_catalog", "information_schema", "pg_toast", "bottler")

# Every session that produces text forms of rows sets these, so that the same value prints the
# same way in both databases whatever their configured defaults.
SESSION_SETTINGS = {
    "datestyle": "ISO, YMD",
    "intervalstyle": "postgres",
    "timezone": "UTC",
    "extra_float_digits": "1",
    "bytea_output": "hex",
}


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # format_type(): "numeric(10,2)", "timestamp with time zone", ...
    collatable: bool
    collation: tuple | None  # what its values sort by (provider, locale...), None if not text


@dataclass(frozen=True)
class TableInfo:
    schema: str
    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...]  # primary-key columns in index order; empty for an unkeyed table

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def column(self, name: str) -> Column:
        return next(c for c in self.columns if c.name == name)


def parse_table(name: str) -> tuple[str, str]:
    """``schema.table`` or ``table`` (in ``public``) → ``(schema, table)``."""
    schema, _, table = name.rpartition(".")
    if not table:
        raise BottlerError(f"invalid table name {name!r}", "write tables as schema.table")
    return (schema or "public", table)


def user_tables(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """Every ordinary or partitioned table outside the system schemas (partitions are part of
    their parent), sorted by schema and name."""
    return [tuple(r) for r in conn.execute(
        """select n.nspname, c.relname from pg_class c join pg_namespace n on n.oid = c.relnamespace
           where c.relkind in ('r', 'p') and not c.relispartition
             and n.nspname <> all(%s) and n.nspname not like 'pg\\_temp\\_%%'
             and n.nspname not like 'pg\\_toast\\_temp\\_%%'
           order by 1, 2""",
        (list(SYSTEM_SCHEMAS),),
    ).fetchall()]


def _collation_signature(row: dict | None, prefix: str) -> tuple:
    """Provider and locale of a pg_database or pg_collation row (as JSON: the column names vary
    with the server's version)."""
    if row is None:
        return ()
    keys = ("locprovider", "collate", "ctype", "iculocale", "locale", "icurules")
    if prefix == "coll":
        keys = ("provider", "collate", "ctype", "iculocale", "locale", "icurules")
    return tuple(row.get(prefix + k) for k in keys)


def table_info(conn: psycopg.Connection, schema: str, table: str) -> TableInfo | None:
    """The table's columns and primary key, or None if there is no such table."""
    found = conn.execute(
        """select c.oid from pg_class c join pg_namespace n on n.oid = c.relnamespace
           where n.nspname = %s and c.relname = %s and c.relkind in ('r', 'p')""",
        (schema, table),
    ).fetchone()
    if found is None:
        return None
    oid = found[0]
    database = conn.execute(
        "select to_jsonb(d) from pg_database d where datname = current_database()"
    ).fetchone()[0]
    columns = []
    for name, type_, collatable, collation in conn.execute(
        """select a.attname, format_type(a.atttypid, a.atttypmod), t.typcollation <> 0,
                  case when a.attcollation not in (0, 100)
                       then (select to_jsonb(co) from pg_collation co where co.oid = a.attcollation)
                  end
           from pg_attribute a join pg_type t on t.oid = a.atttypid
           where a.attrelid = %s and a.attnum > 0 and not a.attisdropped order by a.attnum""",
        (oid,),
    ).fetchall():
        signature = None
        if collatable:
            signature = (_collation_signature(collation, "coll") if collation is not None
                         else _collation_signature(database, "dat"))
        columns.append(Column(name, type_, collatable, signature))
    key = conn.execute(
        """select a.attname from pg_index i
           cross join lateral unnest(i.indkey) with ordinality as k(attnum, n)
           join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
           where i.indrelid = %s and i.indisprimary order by k.n""",
        (oid,),
    ).fetchall()
    return TableInfo(schema, table, tuple(columns), tuple(r[0] for r in key))


def prepare_session(conn: psycopg.Connection) -> None:
    for name, value in SESSION_SETTINGS.items():
        conn.execute("select set_config(%s, %s, false)", (name, value))
