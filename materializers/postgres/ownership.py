"""What the replica owns in the target, so that it never destroys what it did not create.

``bottler.replica_tables`` records each table the replica created (or adopted) and the columns
it created there. Only those columns are ever dropped (the source dropped them) or retyped (the
source changed their type); every other column, and every row of a table the replica did not
create, is the user's. A table that already exists when the replica first meets it is *adopted*
(recorded, its columns left as they are) when it is empty, or when ``--adopt-existing`` says its
rows may be overwritten; otherwise the replica stops with :class:`TargetConflict`. It also
records the topic that feeds each table: a second topic naming the same table (another
capture's same-named table, its prefix aside, sent to the same target) is refused with
:class:`TargetConflict` (:func:`check_feed`) rather than mixing two sources' rows. Before
writing into an existing table, :func:`conflicts` checks that the replica can: the source's key
has a unique index, every column it does not fill may be left null, every column it fills takes
the source's values.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import psycopg

from common.errors import BottlerError
from materializers.core.changes import TableId
from materializers.postgres import adoption
from materializers.postgres.ddl import TableShape, qualified, quote, renames, unique_keys

OWNERSHIP_DDL = [
    "create table if not exists bottler.replica_tables (schema_name text not null,"
    " table_name text not null, adopted boolean not null, columns text[] not null,"
    " primary key (schema_name, table_name))",
    # the topic feeding the table (null: recorded before topics were; the next write fills it).
    # Altered only when missing: ALTER TABLE would lock out the other instances' batches.
    "do $$ begin if not exists (select from pg_attribute where attrelid ="
    " 'bottler.replica_tables'::regclass and attname = 'topic' and not attisdropped) then"
    " alter table bottler.replica_tables add column topic text; end if; end $$",
]
ADOPT_FLAG = "--adopt-existing"


class TargetConflict(BottlerError):
    """The target holds something the replica would have to destroy or cannot write into."""


@dataclass
class Ownership:
    adopted: bool  # the table existed before the replica met it
    columns: frozenset[str]  # the columns the replica created


def load(conn: psycopg.Connection, table: TableId) -> Ownership | None:
    row = conn.execute(
        "select adopted, columns from bottler.replica_tables"
        " where schema_name = %s and table_name = %s", (table.schema, table.table),
    ).fetchone()
    return None if row is None else Ownership(row[0], frozenset(row[1]))


def record(conn: psycopg.Connection, table: TableId, owned: Ownership,
           topic: str | None = None) -> None:
    conn.execute(
        "insert into bottler.replica_tables (schema_name, table_name, adopted, columns, topic)"
        " values (%s, %s, %s, %s, %s) on conflict (schema_name, table_name)"
        " do update set adopted = excluded.adopted, columns = excluded.columns,"
        " topic = coalesce(bottler.replica_tables.topic, excluded.topic)",
        (table.schema, table.table, owned.adopted, sorted(owned.columns), topic),
    )


def check_feed(conn: psycopg.Connection, table: TableId, topic: str,
               seen: str | None = None) -> None:
    """Refuse ``topic`` as a source of ``table`` when another topic feeds it: recorded in
    bottler.replica_tables, or ``seen`` feeding it in this run. A table recorded without a
    topic (before topics were recorded) takes this one."""
    row = conn.execute("select topic from bottler.replica_tables"
                       " where schema_name = %s and table_name = %s",
                       (table.schema, table.table)).fetchone()
    feeder = row[0] if row is not None and row[0] is not None else seen
    if feeder is not None and feeder != topic:
        raise TargetConflict(
            f"target table {table} is fed by topic {feeder}, and topic {topic} names the same"
            " table: two captures' tables of one name cannot share a target table",
            "give each capture's replica its own target database, or read only one of the"
            " topics (--topic)",
        )
    if row is not None and row[0] is None:
        conn.execute("update bottler.replica_tables set topic = %s"
                     " where schema_name = %s and table_name = %s",
                     (topic, table.schema, table.table))


def claim(conn: psycopg.Connection, table: TableId, adopt_existing: bool,
          keep_rows: bool = True) -> Ownership:
    """The ownership of an existing table: as recorded, else adopted if it is empty or
    ``adopt_existing``, else a :class:`TargetConflict`. Adopted with rows and ``keep_rows``
    (its topic has events from before the adoption point), the rows are recorded as the
    user's (:func:`adoption.keep_rows`)."""
    owned = load(conn, table)
    if owned is not None:
        return owned
    has_rows = conn.execute(f"select exists (select from {qualified(table)})").fetchone()[0]
    if has_rows and not adopt_existing:
        raise TargetConflict(
            f"target table {table} already holds rows and was not created by the replica:"
            " writing into it would overwrite the rows whose keys the source also has",
            f"pass {ADOPT_FLAG} to write into it anyway (its other rows and columns are kept),"
            " or drop or rename the table so that the replica creates its own",
        )
    if has_rows and keep_rows:
        adoption.keep_rows(conn, table)
    owned = Ownership(adopted=True, columns=frozenset())
    record(conn, table, owned)
    return owned


def conflicts(conn: psycopg.Connection, table: TableId, existing: TableShape,
              desired: TableShape, owned: Ownership) -> None:
    """Raise :class:`TargetConflict` if the replica cannot write ``desired`` rows into the
    existing table without destroying the user's data or failing on every row."""
    renamed = renames(existing, desired, owned.columns)  # renamed before the key is used
    key = {renamed.get(k, k) for k in desired.key}
    if desired.key and key not in [set(k) for k in unique_keys(conn, table)]:
        have = f"primary key ({', '.join(existing.key)})" if existing.key else "no primary key"
        raise TargetConflict(
            f"target table {table} has {have}, but the source's key is"
            f" ({', '.join(desired.key)}): the replica cannot upsert into it",
            f"give it a unique index: create unique index on {qualified(table)}"
            f" ({', '.join(quote(k) for k in desired.key)}); or drop the table",
        )
    wanted = {c.name for c in desired.columns}
    for name in _unfillable(conn, table):
        if name not in wanted and name not in owned.columns:
            raise TargetConflict(
                f"target column {table}.{name} is NOT NULL without a default, and the source"
                " has no such column: the replica cannot fill it",
                f"give it a default (alter table {qualified(table)} alter column {quote(name)}"
                f" set default …) or drop its NOT NULL",
            )
    have = {c.name: c for c in existing.columns}
    for column in desired.columns:
        current = have.get(column.name)
        if current is None or column.name in owned.columns or current.generated:
            continue  # added, the replica's own (evolved to the source's type), or computed
        if not _accepts(conn, current.type, column.type):
            raise TargetConflict(
                f"target column {table}.{column.name} is {current.type}, but the source's is"
                f" {column.type}: the replica cannot write it without losing data",
                f"alter it: alter table {qualified(table)} alter column {quote(column.name)}"
                f" type {column.type}; or drop the table so that the replica creates it",
            )


def _unfillable(conn: psycopg.Connection, table: TableId) -> Iterable[str]:
    """Columns an insert that does not name them fails on: NOT NULL, no default."""
    rows = conn.execute(
        "select attname from pg_attribute where attrelid = %s::regclass and attnum > 0"
        " and not attisdropped and attnotnull and not atthasdef and attidentity = ''"
        " and attgenerated = ''", (qualified(table),),
    ).fetchall()
    return [r[0] for r in rows]


def _accepts(conn: psycopg.Connection, have: str, want: str) -> bool:
    """Whether a column of type ``have`` takes the source's values of type ``want`` (written
    as text) without loss: the same type (the type modifier aside), a type the source's
    converts to implicitly (integer into bigint, varchar into text), a domain over it, or,
    for a source type
    the replica writes as text (enums, composites, extension types), the user's own type."""
    row = conn.execute(
        "select h.oid = w.oid"
        " or exists (select from pg_cast c where c.castsource = w.oid"
        "            and c.casttarget = h.oid and c.castcontext = 'i')"
        " or h.typbasetype = w.oid"
        " or (w.oid = 'text'::regtype and h.typnamespace <> 'pg_catalog'::regnamespace)"
        " from pg_type h, pg_type w where h.oid = to_regtype(%s) and w.oid = to_regtype(%s)",
        (have, want),
    ).fetchone()
    return bool(row and row[0])
