"""The source database: checks before capture starts, the publication, and the published tables
with their keys, as PostgreSQL's catalogs describe them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from capture.typecatalog import load_columns
from common.errors import BottlerError
from common.pg import connect
from schemas.pgtypes import Column, libpq_options

log = logging.getLogger(__name__)

SETUP_DOC = "docs/capture-setup.md"  # the least-privilege setup and every start-up error
LEAST_PRIVILEGE_DOC = SETUP_DOC


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
    row = conn.execute(
        "select active_pid, database = current_database(), plugin, database "
        "from pg_replication_slots where slot_name = %s",
        (slot,),
    ).fetchone()
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


def ensure_publication(conn: psycopg.Connection, name: str, tables: list[str]) -> None:
    """Use the publication if it exists, else create it for ``tables`` (or all tables)."""
    if conn.execute("select 1 from pg_publication where pubname = %s", (name,)).fetchone():
        return
    target = (
        sql.SQL("FOR TABLE {}").format(sql.SQL(", ").join(_table_ident(t) for t in tables))
        if tables else sql.SQL("FOR ALL TABLES")
    )
    statement = sql.SQL("CREATE PUBLICATION {} ").format(sql.Identifier(name)) + target
    try:
        with conn.transaction():
            conn.execute(statement)
    except psycopg.errors.UndefinedTable as exc:
        raise BottlerError(
            f"--tables names a table that does not exist: {_first_line(exc)}",
            "name existing tables as schema.table (public. may be omitted)",
        ) from None
    except psycopg.errors.InsufficientPrivilege:
        who = "a superuser" if not tables else "the tables' owner (or a superuser)"
        raise BottlerError(
            f"publication {name} does not exist, and role {_current_user(conn)} may not "
            "create it",
            f"have {who} run: {statement.as_string(conn)}; then pass --publication {name} "
            f"(see {SETUP_DOC})",
        ) from None
    except psycopg.Error as exc:
        raise BottlerError(
            f"cannot create publication {name}: {_first_line(exc)}",
            f"create it yourself ({statement.as_string(conn)};) and pass --publication {name}",
        ) from None
    log.info("created publication %s", statement.as_string(conn))


def published_tables(
    conn: psycopg.Connection, publication: str, only: list[str] | None = None
) -> list[SourceTable]:
    if not conn.execute(
        "select 1 from pg_publication where pubname = %s", (publication,)
    ).fetchone():
        raise BottlerError(
            f"publication {publication} does not exist in this database",
            f"create it (see {SETUP_DOC}) or check --publication and the DSN's database",
        )
    rows = conn.execute(
        """
        select c.oid, n.nspname, c.relname, c.relreplident, c.relpages,
               has_schema_privilege(n.oid, 'USAGE'), has_table_privilege(c.oid, 'SELECT')
        from pg_publication_tables p
        join pg_namespace n on n.nspname = p.schemaname
        join pg_class c on c.relnamespace = n.oid and c.relname = p.tablename
        where p.pubname = %s
        order by n.nspname, c.relname
        """,
        (publication,),
    ).fetchall()
    wanted = {_qualify(t) for t in only or []}
    if missing := sorted(wanted - {f"{r[1]}.{r[2]}" for r in rows}):
        pub = sql.Identifier(publication).as_string(conn)
        raise BottlerError(
            f"--tables names tables that publication {publication} does not publish: "
            f"{', '.join(missing)}",
            f"have the tables' owner run ALTER PUBLICATION {pub} ADD TABLE "
            f"{', '.join(missing)}; or drop them from --tables",
        )
    tables = []
    for oid, schema, name, replident, pages, can_use_schema, can_select in rows:
        if wanted and f"{schema}.{name}" not in wanted:
            continue
        if not can_use_schema or not can_select:
            role = sql.Identifier(_current_user(conn)).as_string(conn)
            grant = (f"GRANT USAGE ON SCHEMA {sql.Identifier(schema).as_string(conn)} TO {role};"
                     if not can_use_schema else
                     f"GRANT SELECT ON {sql.Identifier(schema, name).as_string(conn)} "
                     f"TO {role};")
            raise BottlerError(
                f"role {_current_user(conn)} may not read {schema}.{name}, which publication "
                f"{publication} publishes",
                f"have the table's owner run: {grant} (see {SETUP_DOC})",
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


def _table_ident(table: str) -> sql.Identifier:
    return sql.Identifier(*_qualify(table).split(".", 1))


def _current_user(conn: psycopg.Connection) -> str:
    return conn.execute("select current_user").fetchone()[0]


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
