"""Target tables from Avro schemas: creation (CREATE TABLE) and evolution (ALTER TABLE).

A table's *shape* is its columns in order (name, PostgreSQL type, NOT NULL) and its primary key.
:func:`desired_shape` reads it from a value (and key) schema; :func:`existing_shape` from the
target's catalog; :func:`create_statements` and :func:`evolve_statements` give the SQL that makes
the target match. Never a foreign key.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, replace

import psycopg
from psycopg import sql

from materializers.core.changes import TableId

__all__ = [
    "ColumnShape",
    "Statement",
    "TableShape",
    "create_statements",
    "desired_shape",
    "evolve_statements",
    "existing_shape",
    "quote",
    "qualified",
    "renames",
]

def quote(name: str) -> str:
    """An identifier, always double-quoted (names keep their case and characters)."""
    return sql.Identifier(name).as_string()


def qualified(table: TableId) -> str:
    return f"{quote(table.schema)}.{quote(table.table)}"


class Statement(str):
    """A DDL statement, with the one to run instead if the rows' values do not convert."""

    fallback: str | None = None

    @classmethod
    def of(cls, text: str, fallback: str | None = None) -> Statement:
        statement = cls(text)
        statement.fallback = fallback
        return statement


@dataclass(frozen=True)
class ColumnShape:
    name: str  # the PostgreSQL column name (``pg.name``)
    type: str  # PostgreSQL type text, as format_type prints it
    not_null: bool = False
    field: str = ""  # the Avro field name (empty for a shape read from the catalog)
    missing: str | None = None  # ``pg.missing``: the value of rows older than the column
    renamed: str | None = None  # ``pg.renamed``: the column's name before RENAME COLUMN
    generated: bool = False  # the target's column is GENERATED: it computes its own values


@dataclass(frozen=True)
class TableShape:
    columns: tuple[ColumnShape, ...]
    key: tuple[str, ...]  # primary key column names, in key order; empty for unkeyed tables

    def column(self, name: str) -> ColumnShape | None:
        return next((c for c in self.columns if c.name == name), None)


def desired_shape(value_schema: dict, key_schema: dict | None,
                  target_type: Callable[[dict], str]) -> TableShape:
    """The shape a value schema asks for: a column per field (``pg.name``, ``target_type(field)``,
    ``pg.notnull``), the key schema's fields as primary key."""
    columns = tuple(
        ColumnShape(f.get("pg.name", f["name"]), target_type(f), bool(f.get("pg.notnull")),
                    f["name"], f.get("pg.missing"), f.get("pg.renamed"))
        for f in value_schema["fields"]
    )
    key: tuple[str, ...] = ()
    if key_schema is not None:
        by_field = {c.field: c.name for c in columns}
        key = tuple(f.get("pg.name", by_field.get(f["name"], f["name"]))
                    for f in key_schema["fields"])
        # key columns are NOT NULL whatever the value schema says
        columns = tuple(
            replace(c, not_null=True) if c.name in key else c
            for c in columns
        )
    return TableShape(columns, key)


def existing_shape(conn: psycopg.Connection, table: TableId) -> TableShape | None:
    """The target table's shape, or None if it does not exist."""
    row = conn.execute("select to_regclass(%s)::oid", (qualified(table),)).fetchone()
    if row is None or row[0] is None:
        return None
    oid = row[0]
    columns = tuple(
        ColumnShape(name, typ, notnull, generated=generated)
        for name, typ, notnull, generated in conn.execute(
            "select attname, format_type(atttypid, atttypmod), attnotnull, attgenerated <> ''"
            " from pg_attribute"
            " where attrelid = %s and attnum > 0 and not attisdropped order by attnum",
            (oid,),
        ).fetchall()
    )
    key = tuple(
        r[0] for r in conn.execute(
            "select a.attname from pg_index i"
            " cross join lateral unnest(i.indkey) with ordinality as k(attnum, n)"
            " join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum"
            " where i.indrelid = %s and i.indisprimary order by k.n",
            (oid,),
        ).fetchall()
    )
    return TableShape(columns, key)


def unique_keys(conn, table: TableId) -> list[list[str]]:
    """The columns, in index order, of each of the table's unique indexes an ``ON CONFLICT``
    can use (no predicate, no expression): the primary key first, then the narrowest."""
    rows = conn.execute(
        "select array_agg(a.attname order by k.ord) from pg_index i"
        " cross join unnest(i.indkey) with ordinality k(attnum, ord)"
        " join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum"
        " where i.indrelid = %s::regclass and i.indisunique and i.indpred is null"
        " and i.indexprs is null group by i.indexrelid, i.indisprimary"
        " order by i.indisprimary desc, count(*)", (qualified(table),),
    ).fetchall()
    return [list(r[0]) for r in rows]


def create_statements(table: TableId, shape: TableShape) -> list[str]:
    """``CREATE SCHEMA IF NOT EXISTS`` and ``CREATE TABLE``, composed with psycopg's ``sql``
    (identifiers quoted; each type as PostgreSQL's own text). SQLAlchemy Core did this before:
    its import took 0.1-0.15 s of every replica's start, on a seeded migration's path."""
    columns = [sql.SQL("{} {}{}").format(sql.Identifier(c.name), sql.SQL(c.type),
                                         sql.SQL(" NOT NULL" if c.not_null else ""))
               for c in shape.columns]
    if shape.key:
        columns.append(sql.SQL("PRIMARY KEY ({})").format(
            sql.SQL(", ").join(map(sql.Identifier, shape.key))))
    statements = []
    if table.schema != "public":
        statements.append(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
            sql.Identifier(table.schema)).as_string())
    statements.append(sql.SQL("CREATE TABLE {} (\n\t{}\n)").format(
        sql.Identifier(table.schema, table.table), sql.SQL(",\n\t").join(columns)).as_string())
    return statements


def renames(existing: TableShape, desired: TableShape, owned: Collection[str]) -> dict[str, str]:
    """The columns to rename in place (new name -> old name): those the source renamed
    (``pg.renamed``) where the old name is the replica's own column, gone from the source, and
    the new name is free."""
    wanted = {c.name for c in desired.columns}
    have = {c.name for c in existing.columns}
    return {c.name: c.renamed for c in desired.columns
            if c.renamed and c.name not in have and c.renamed in have and c.renamed in owned
            and c.renamed not in wanted}


def evolve_statements(table: TableId, existing: TableShape, desired: TableShape,
                      owned: Collection[str]) -> list[str]:
    """``ALTER TABLE`` statements taking ``existing`` to ``desired``, touching only the
    ``owned`` columns (those the replica created) of what is there: renamed columns renamed
    (their rows keep their values), dropped columns dropped, new ones added (nullable; the rows
    already there get the source's ``pg.missing`` value, the one its older rows read for a
    column added with a default, else NULL), type changes through ``USING col::text::newtype``,
    NOT NULL dropped where the source dropped it (set only at creation). The primary key is
    kept (under its columns' new names), and so is every column the replica did not create.
    A type change is a :class:`Statement` with a fallback for values that do not convert."""
    name = qualified(table)
    wanted = {c.name for c in desired.columns}
    renamed = renames(existing, desired, owned)
    out = [f"alter table {name} rename column {quote(old)} to {quote(new)}"
           for new, old in renamed.items()]
    to_new = {old: new for new, old in renamed.items()}
    have = {to_new.get(c.name, c.name): c for c in existing.columns}  # after the renames
    key = {to_new.get(k, k) for k in existing.key}
    owned = {*owned, *renamed}
    for column in existing.columns:
        if (column.name not in wanted and column.name not in existing.key
                and column.name in owned and column.name not in renamed.values()):
            out.append(f"alter table {name} drop column {quote(column.name)}")
    for column in desired.columns:
        current = have.get(column.name)
        col = quote(column.name)
        if current is None:
            if column.missing is None:
                out.append(f"alter table {name} add column {col} {column.type}")
            else:  # the rows already there take the source's value, as the source's rows did
                literal = "'" + column.missing.replace("'", "''") + "'"
                out.append(f"alter table {name} add column {col} {column.type}"
                           f" default {literal}::{column.type}")
                out.append(f"alter table {name} alter column {col} drop default")
            continue
        if column.name not in owned:
            continue  # the user's column: ownership.conflicts checked that it takes the values
        if current.type != column.type:
            # A value that does not convert (``TYPE integer USING length(a)`` at the source)
            # empties the column instead: the capture publishes the table again after a type
            # change (docs/capture.md), which brings the source's values.
            retype = f"alter table {name} alter column {col} type {column.type} using"
            out.append(Statement.of(f"{retype} {col}::text::{column.type}", f"{retype} null"))
        if current.not_null and not column.not_null and column.name not in key:
            out.append(f"alter table {name} alter column {col} drop not null")
    return out
