"""The source database: checks before capture starts, the publication, and the published tables
with their keys, as PostgreSQL's catalogs describe them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from bottler.errors import BottlerError
from bottler.pg import connect
from capture.typecatalog import load_columns
from schemas.pgtypes import Column, libpq_options

log = logging.getLogger(__name__)

LEAST_PRIVILEGE_DOC = "docs/capture.md#least-privilege"


@dataclass
class SourceTable:
    oid: int
    schema: str
    name: str
    columns: list[Column]
    key: list[str]  # primary key or replica-identity index columns; empty when unkeyed
    replica_identity: str  # d(efault), n(othing), f(ull), i(ndex)
    toastable: list[str] = field(default_factory=list)  # may arrive as "unchanged" in updates
    pages: int = 0

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def ident(self) -> sql.Composed:
        return sql.Identifier(self.schema, self.name)


def session_connect(dsn: str, **kwargs) -> psycopg.Connection:
    """A connection whose text output is what our converters expect."""
    return connect(dsn, options=libpq_options(), **kwargs)


def preflight(conn: psycopg.Connection, slot: str) -> None:
    """Refuse early, with the fix, what would fail later."""
    wal_level = conn.execute("show wal_level").fetchone()[0]
    if wal_level != "logical":
        raise BottlerError(
            f"the source database has wal_level = {wal_level}; logical decoding needs logical",
            "run ALTER SYSTEM SET wal_level = logical; and restart PostgreSQL",
        )
    user, can_replicate = conn.execute(
        "select current_user, rolreplication or rolsuper from pg_roles where rolname = current_user"
    ).fetchone()
    if not can_replicate:
        raise BottlerError(
            f"role {user} may not use replication",
            f"ALTER ROLE {user} REPLICATION; (see {LEAST_PRIVILEGE_DOC})",
        )
    row = conn.execute(
        "select active_pid, database = current_database(), plugin "
        "from pg_replication_slots where slot_name = %s",
        (slot,),
    ).fetchone()
    if row and row[0]:
        raise BottlerError(
            f"replication slot {slot} is in use by another process (pid {row[0]})",
            "stop the other capture, or choose another --slot",
        )
    if row and not row[1]:
        raise BottlerError(
            f"replication slot {slot} belongs to another database",
            "choose another --slot",
        )
    if row and row[2] != "pgoutput":
        raise BottlerError(
            f"replication slot {slot} uses the {row[2]} plugin, not pgoutput",
            f"drop it (bottler slot drop --slot {slot}) or choose another --slot",
        )


def ensure_publication(conn: psycopg.Connection, name: str, tables: list[str]) -> None:
    """Use the publication if it exists, else create it for ``tables`` (or all tables)."""
    if conn.execute("select 1 from pg_publication where pubname = %s", (name,)).fetchone():
        return
    target = (
        sql.SQL("for table {}").format(sql.SQL(", ").join(_table_ident(t) for t in tables))
        if tables else sql.SQL("for all tables")
    )
    try:
        with conn.transaction():
            conn.execute(sql.SQL("create publication {} ").format(sql.Identifier(name)) + target)
    except psycopg.errors.UndefinedTable as exc:
        raise BottlerError(f"--tables names a table that does not exist: {exc}") from None
    except psycopg.errors.InsufficientPrivilege:
        raise BottlerError(
            f"publication {name} does not exist, and this role may not create it",
            f"have the tables' owner run: CREATE PUBLICATION {name} {target.as_string(conn)}; "
            f"then pass --publication {name} (see {LEAST_PRIVILEGE_DOC})",
        ) from None
    log.info("created publication %s %s", name, target.as_string(conn))


def published_tables(
    conn: psycopg.Connection, publication: str, only: list[str] | None = None
) -> list[SourceTable]:
    rows = conn.execute(
        """
        select c.oid, n.nspname, c.relname, c.relreplident, c.relpages,
               has_table_privilege(c.oid, 'SELECT')
        from pg_publication_tables p
        join pg_namespace n on n.nspname = p.schemaname
        join pg_class c on c.relnamespace = n.oid and c.relname = p.tablename
        where p.pubname = %s
        order by n.nspname, c.relname
        """,
        (publication,),
    ).fetchall()
    wanted = {_qualify(t) for t in only or []}
    tables = []
    for oid, schema, name, replident, pages, can_select in rows:
        if wanted and f"{schema}.{name}" not in wanted:
            continue
        if not can_select:
            raise BottlerError(
                f"this role may not read {schema}.{name}",
                f"GRANT SELECT ON {schema}.{name} TO <role>; (see {LEAST_PRIVILEGE_DOC})",
            )
        tables.append(SourceTable(
            oid=oid, schema=schema, name=name, columns=load_columns(conn, oid),
            key=key_columns(conn, oid, replident), replica_identity=replident,
            toastable=toastable_columns(conn, oid), pages=max(pages, 0),
        ))
    return tables


def key_columns(conn: psycopg.Connection, oid: int, replident: str) -> list[str]:
    """The replica-identity index when the table uses one, else the primary key."""
    use = "indisreplident" if replident == "i" else "indisprimary"
    return [r[0] for r in conn.execute(
        f"""
        select a.attname
        from pg_index i
        cross join lateral unnest(i.indkey) with ordinality k(attnum, pos)
        join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
        where i.indrelid = %s and i.{use}
        order by k.pos
        """,
        (oid,),
    )]


def toastable_columns(conn: psycopg.Connection, oid: int) -> list[str]:
    return [r[0] for r in conn.execute(
        "select attname from pg_attribute where attrelid = %s and attnum > 0 "
        "and not attisdropped and attlen = -1 and attstorage <> 'p' order by attnum",
        (oid,),
    )]


def check_keys(tables: list[SourceTable], allow_unkeyed: bool) -> None:
    unkeyed = [t.qualified for t in tables if not t.key]
    if unkeyed and not allow_unkeyed:
        raise BottlerError(
            f"tables without a primary key or replica-identity index: {', '.join(unkeyed)}",
            "add a primary key, or pass --allow-unkeyed (their rows are published without a "
            "key and their deletes are not published)",
        )


def check_toast(conn: psycopg.Connection, tables: list[SourceTable], set_full: bool) -> None:
    """Updates that leave a TOASTed value untouched do not carry it, unless the table has
    REPLICA IDENTITY FULL; without it such an update could not be published complete."""
    for t in tables:
        if not t.toastable or t.replica_identity == "f":
            continue
        if set_full:
            try:
                with conn.transaction():
                    conn.execute(sql.SQL("alter table {} replica identity full").format(t.ident))
            except psycopg.errors.InsufficientPrivilege:
                raise BottlerError(
                    f"this role may not set REPLICA IDENTITY FULL on {t.qualified}",
                    f"have its owner run: ALTER TABLE {t.qualified} REPLICA IDENTITY FULL;",
                ) from None
            t.replica_identity = "f"
            log.info("%s: set REPLICA IDENTITY FULL", t.qualified)
        else:
            log.warning(
                "%s: columns %s may be TOASTed and the table has REPLICA IDENTITY %s, so an "
                "update that leaves them untouched cannot be published complete (it is "
                "refused by the --on-error policy); run ALTER TABLE %s REPLICA IDENTITY FULL, "
                "or pass --replica-identity-full",
                t.qualified, ", ".join(t.toastable),
                {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}[t.replica_identity],
                t.qualified,
            )


def _qualify(table: str) -> str:
    return table if "." in table else f"public.{table}"


def _table_ident(table: str) -> sql.Identifier:
    return sql.Identifier(*_qualify(table).split(".", 1))
