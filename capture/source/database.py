"""The source database: checks before capture starts, the publication, and the published tables
with their keys, as PostgreSQL's catalogs describe them."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from capture.source import versions
from capture.source.typecatalog import load_columns
from common.errors import BottlerError
from common.pg import connect
from schemas.pgtypes import Column, libpq_options

log = logging.getLogger(__name__)

SETUP_DOC = "docs/capture-setup.md"  # the least-privilege setup and every start-up error
LEAST_PRIVILEGE_DOC = SETUP_DOC
# A capture that has just stopped leaves its slot active until its walsender notices the closed
# connection, a moment later: a start right after it (a restart) waits that long for the slot.
SLOT_RELEASE_WAIT = 5.0  # seconds


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
    versions.check_supported(conn.info.server_version)
    settings = dict(conn.execute(
        "select name, setting from pg_settings "
        "where name in ('wal_level', 'max_replication_slots', 'max_wal_senders')"
    ).fetchall())
    wal_level = settings.get("wal_level")
    if wal_level != "logical":
        raise BottlerError(
            f"the source database has wal_level = {wal_level}; logical decoding needs "
            "wal_level = logical",
            "as a superuser run ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL "
            f"(a reload is not enough); see {SETUP_DOC}",
        )
    for name in ("max_replication_slots", "max_wal_senders"):
        if int(settings.get(name) or 0) < 1:
            raise BottlerError(
                f"the source database has {name} = {settings.get(name)}; the capture needs "
                "at least one",
                f"as a superuser run ALTER SYSTEM SET {name} = 10; then restart PostgreSQL "
                f"(see {SETUP_DOC})",
            )
    user, can_replicate = conn.execute(
        "select current_user, rolreplication or rolsuper from pg_roles where rolname = current_user"
    ).fetchone()
    if not can_replicate:
        role = sql.Identifier(user).as_string(conn)
        raise BottlerError(
            f"role {user} may not use replication (it lacks the REPLICATION attribute)",
            f"as a superuser run ALTER ROLE {role} REPLICATION; (see {SETUP_DOC})",
        )
    row = _slot(conn, slot)
    released_by = time.monotonic() + SLOT_RELEASE_WAIT
    while row and row[0] and time.monotonic() < released_by:
        time.sleep(0.1)
        row = _slot(conn, slot)
    if row and row[0]:
        raise BottlerError(
            f"replication slot {slot} is in use by another process (pid {row[0]})",
            "stop the other capture, or choose another --slot; `bottler slot status` shows "
            f"the slot; if that process is stuck, a superuser can end it with "
            f"SELECT pg_terminate_backend({row[0]});",
        )
    if row and row[2] != "pgoutput":
        raise BottlerError(
            f"replication slot {slot} uses the {row[2]} plugin, not pgoutput",
            f"drop it (bottler slot drop --slot {slot}) or choose another --slot",
        )
    if row and not row[1]:
        raise BottlerError(
            f"replication slot {slot} belongs to another database ({row[3]})",
            "choose another --slot (slot names are shared by every database of the server)",
        )
    if row is None:
        used, limit = conn.execute(
            "select count(*), current_setting('max_replication_slots')::int "
            "from pg_replication_slots"
        ).fetchone()
        if used >= limit:
            raise BottlerError(
                f"cannot create replication slot {slot}: all replication slots are in use "
                f"({used} of max_replication_slots = {limit})",
                "raise max_replication_slots (ALTER SYSTEM SET max_replication_slots = N; then "
                "restart PostgreSQL), or drop unused slots (bottler slot status, bottler slot "
                "drop)",
            )


def _slot(conn: psycopg.Connection, slot: str) -> tuple | None:
    """The slot's active pid, whether it is of this database, its plugin and its database."""
    return conn.execute(
        "select active_pid, database = current_database(), plugin, database "
        "from pg_replication_slots where slot_name = %s", (slot,)).fetchone()


def published_tables(
    conn: psycopg.Connection, publications: list[str], only: list[str] | None = None,
    generated: bool = False,
) -> list[SourceTable]:
    """The tables ``publications`` publish (``only`` those, when given), described
    (``generated``: with their generated columns, which the publications publish)."""
    found = {r[0] for r in conn.execute(
        "select pubname from pg_publication where pubname = any(%s)", (publications,))}
    for publication in publications:
        if publication not in found:
            raise BottlerError(
                f"publication {publication} does not exist in this database",
                f"create it (see {SETUP_DOC}) or check --publication and the DSN's database; "
                "without --publication the capture creates and manages its own",
            )
    rows = conn.execute(
        """
        select distinct c.oid, n.nspname, c.relname
        from pg_publication_tables p
        join pg_namespace n on n.nspname = p.schemaname
        join pg_class c on c.relnamespace = n.oid and c.relname = p.tablename
        where p.pubname = any(%s)
        order by n.nspname, c.relname
        """,
        (publications,),
    ).fetchall()
    wanted = {_qualify(t) for t in only or []}
    if missing := sorted(wanted - {f"{r[1]}.{r[2]}" for r in rows}):
        pub = sql.Identifier(publications[0]).as_string(conn)
        raise BottlerError(
            f"--tables names tables that publication {publications[0]} does not publish: "
            f"{', '.join(missing)}",
            f"have the tables' owner run ALTER PUBLICATION {pub} ADD TABLE "
            f"{', '.join(missing)}; or drop them from --tables",
        )
    rows = [r for r in rows if not wanted or f"{r[1]}.{r[2]}" in wanted]
    return describe(conn, rows, publications[0], generated)


def describe(conn: psycopg.Connection, tables: list[tuple[int, str, str]],
             publication: str = "", generated: bool = False) -> list[SourceTable]:
    """Each (oid, schema, name) as the catalog describes it; raises on one this role may not
    read, with the grant that fixes it."""
    described = []
    for oid, schema, name in tables:
        row = conn.execute(
            "select c.relreplident, c.relpages, has_schema_privilege(c.relnamespace, 'USAGE'), "
            "has_table_privilege(c.oid, 'SELECT') from pg_class c where c.oid = %s", (oid,)
        ).fetchone()
        if row is None:
            continue  # dropped since it was listed
        replident, pages, can_use_schema, can_select = row
        if not can_use_schema or not can_select:
            raise unreadable(conn, schema, name, publication, schema_usage=not can_use_schema)
        described.append(SourceTable(
            oid=oid, schema=schema, name=name,
            columns=load_columns(conn, oid, include_generated=generated),
            key=key_columns(conn, oid, replident), replica_identity=replident,
            toastable=toastable_columns(conn, oid), pages=max(pages, 0),
        ))
    return described


def describe_oids(conn: psycopg.Connection, oids: list[int],
                  generated: bool = False) -> list[SourceTable]:
    """The tables of ``oids`` that still exist, described."""
    rows = conn.execute(
        "select c.oid, n.nspname, c.relname from pg_class c "
        "join pg_namespace n on n.oid = c.relnamespace where c.oid = any(%s) "
        "order by n.nspname, c.relname", (oids,)).fetchall()
    return describe(conn, rows, generated=generated)


def unreadable(conn: psycopg.Connection, schema: str, name: str, publication: str,
               schema_usage: bool | None = None) -> BottlerError:
    if schema_usage is None:
        schema_usage = not conn.execute(
            "select has_schema_privilege(%s, 'USAGE')", (schema,)).fetchone()[0]
    role = sql.Identifier(current_user(conn)).as_string(conn)
    grant = (f"GRANT USAGE ON SCHEMA {sql.Identifier(schema).as_string(conn)} TO {role};"
             if schema_usage else
             f"GRANT SELECT ON {sql.Identifier(schema, name).as_string(conn)} TO {role};")
    return BottlerError(
        f"role {current_user(conn)} may not read {schema}.{name}, which publication "
        f"{publication} publishes",
        f"have the table's owner run: {grant} (see {SETUP_DOC})",
    )


def key_columns(conn: psycopg.Connection, oid: int, replident: str) -> list[str]:
    """The replica-identity index when the table uses one, else the primary key (none under
    REPLICA IDENTITY NOTHING: PostgreSQL then logs no key at all)."""
    if replident == "n":
        return []
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
    """Columns whose values can be stored out of line (over ~2 kB): variable-length and not
    PLAIN, leaving out those too short to get there (varchar(n), char(n) with small n, and
    numerics with a precision)."""
    return [r[0] for r in conn.execute(
        """
        select a.attname from pg_attribute a join pg_type t on t.oid = a.atttypid
        where a.attrelid = %s and a.attnum > 0 and not a.attisdropped
          and a.attlen = -1 and a.attstorage <> 'p'
          and not (t.typname in ('varchar', 'bpchar') and a.atttypmod between 0 and 504)
          and not (t.typname = 'numeric' and a.atttypmod >= 0)
        order by a.attnum
        """,
        (oid,),
    )]


def check_keys(tables: list[SourceTable], allow_unkeyed: bool) -> None:
    unkeyed = [t.qualified for t in tables if not t.key]
    if unkeyed and not allow_unkeyed:
        raise BottlerError(
            f"tables without a primary key or replica-identity index: {', '.join(unkeyed)}",
            "add a primary key, or pass --allow-unkeyed (their rows are published without a "
            "key; their deletes, and their updates unless the table has REPLICA IDENTITY FULL, "
            "are not published)",
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
                "%s: REPLICA IDENTITY %s, and %s can hold values over 2 kB; an update that "
                "leaves such a value untouched cannot be published complete and follows "
                "--on-error. Fix: ALTER TABLE %s REPLICA IDENTITY FULL (or pass "
                "--replica-identity-full)",
                t.qualified,
                {"d": "DEFAULT", "n": "NOTHING", "i": "USING INDEX"}[t.replica_identity],
                ", ".join(t.toastable), t.qualified,
            )


def _qualify(table: str) -> str:
    return table if "." in table else f"public.{table}"


def current_user(conn: psycopg.Connection) -> str:
    return conn.execute("select current_user").fetchone()[0]


def first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
