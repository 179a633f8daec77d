"""`bottler capture snapshot`: a request to a capture, written into the WAL as a logical decoding
message (`pg_logical_emit_message`), which the capture reads from its stream in commit order.
Nothing is created on the source, and a capture that is not running finds the request when it
resumes (its slot keeps the WAL)."""

from __future__ import annotations

import json

import psycopg

from capture.snapshot.incremental import SIGNAL_PREFIX
from capture.source import standby
from capture.source.database import session_connect
from common.errors import BottlerError
from common.pg import emit_message_function


def request_snapshot(dsn: str, slot: str, table: str,
                     primary: str | None = None) -> tuple[str, str]:
    """Ask the capture of ``slot`` to re-publish ``table``; return the request's WAL position
    and the table's qualified name. ``dsn`` a standby (the capture decodes there): the request
    is written on its ``primary``."""
    name = table if "." in table else f"public.{table}"
    with session_connect(dsn, autocommit=True) as conn:
        if conn.execute("select 1 from pg_replication_slots where slot_name = %s "
                        "and database = current_database()", (slot,)).fetchone() is None:
            raise BottlerError(
                f"this database has no replication slot {slot}",
                "pass the capture's --slot, and a DSN of the database it captures "
                "(bottler slot status lists the slots)")
        row = conn.execute(
            "select n.nspname, c.relname, c.relkind, exists (select from pg_publication_tables p "
            "where p.schemaname = n.nspname and p.tablename = c.relname) "
            "from pg_class c join pg_namespace n on n.oid = c.relnamespace "
            "where c.oid = to_regclass(%s)", (_quoted(name),)).fetchone()
        if row is None or row[2] not in ("r", "p"):
            raise BottlerError(f"there is no table {name}",
                               "name a captured table as schema.table (public. may be omitted)")
        schema, relname, _, published = row
        qualified = f"{schema}.{relname}"
        if not published:
            raise BottlerError(f"{qualified} is in no publication: no capture captures it",
                               "a table joins the capture's publication by itself once it can "
                               "be captured (see docs/capture.md, Publications)")
        request = json.dumps({"type": "snapshot", "slot": slot, "table": _quoted(qualified)})
        writer = standby.primary_of(conn, primary)  # None: this server takes writes
        try:
            return _emit(writer or conn, request), qualified
        finally:
            if writer is not None:
                writer.close()


def _emit(conn: psycopg.Connection, request: str) -> str:
    try:
        return conn.execute("select pg_logical_emit_message(true, %s, %s)::text",
                            (SIGNAL_PREFIX, request)).fetchone()[0]
    except psycopg.errors.InsufficientPrivilege:
        raise BottlerError(
            "this role may not call pg_logical_emit_message",
            "connect as the capture's role (it has REPLICATION), or have a superuser "
            f"GRANT EXECUTE ON FUNCTION {emit_message_function(conn)} to this role",
        ) from None


def _quoted(name: str) -> str:
    """schema.table as to_regclass reads it, each part quoted (names may hold dots or capitals)
    unless already quoted."""
    if '"' in name:
        return name
    schema, _, table = name.partition(".")
    return ".".join('"' + part.replace('"', '""') + '"' for part in (schema, table))
