"""Connecting to PostgreSQL with errors a user can act on (and no password in them)."""

from __future__ import annotations

import os
import re

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from common.errors import BottlerError
from common.redact import redact


def connect(dsn: str, **kwargs) -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, connect_timeout=10, **kwargs)
    except psycopg.OperationalError as exc:
        reason = redact(_reason(exc))
        if "pg_hba" in reason:
            hint = "add a line for this host, user and database to the server's pg_hba.conf"
        elif "password authentication failed" in reason:
            hint = "check the user and password in the DSN"
        else:
            hint = "check the DSN (host, port, database, user, password) and that the server is up"
        message = f"cannot connect to PostgreSQL at {redact(dsn)}: {reason}"
        raise BottlerError(message, hint) from None
    except psycopg.ProgrammingError as exc:
        raise BottlerError(f"invalid PostgreSQL DSN {redact(dsn)}: {redact(str(exc))}") from None


# psycopg's summary of a multi-host DSN's attempts: one line per host after the last one's error
_ATTEMPT = re.compile(r"^- host: '([^']*)', port: '([^']*)'.*failed: ([^:]*)$")


def _reason(exc: psycopg.OperationalError) -> str:
    """Why the connection failed, in one line; with several hosts (``host=a,b``), each one's."""
    text = str(exc).strip()
    if not text:
        return repr(exc)
    attempts = [m.groups() for line in text.splitlines() if (m := _ATTEMPT.match(line))]
    if len(attempts) > 1:
        return "no host of the DSN answered: " + ", ".join(
            f"{host}:{port} ({why.strip()})" for host, port, why in attempts)
    return text.splitlines()[0]


def client_args(dsn: str) -> tuple[str, dict[str, str]]:
    """For a PostgreSQL client program (``psql``, ``pg_dump``): the DSN without its password
    (a process's arguments are visible to every user) and an environment with PGPASSWORD."""
    params = conninfo_to_dict(dsn)
    password = params.pop("password", None)
    env = dict(os.environ)
    if password is not None:
        env["PGPASSWORD"] = str(password)
    return make_conninfo(**params), env


def emit_message_function(conn: psycopg.Connection) -> str:
    """The text variant of ``pg_logical_emit_message`` as this server declares it, for a
    privilege check or a GRANT: ``(boolean, text, text)``, with a fourth ``boolean`` (flush)
    from PostgreSQL 17 on. Read from the catalog, never assumed from the version."""
    return conn.execute(
        "select p.oid::regprocedure::text from pg_proc p "
        "where p.proname = 'pg_logical_emit_message' and p.proargtypes[2] = 'text'::regtype "
        "and p.pronamespace = 'pg_catalog'::regnamespace").fetchone()[0]


# Where the server's WAL is, in SQL: a standby (in recovery) cannot ask pg_current_wal_lsn(),
# and what it shows is what it has replayed.
WAL_POSITION = ("(case when pg_is_in_recovery() then pg_last_wal_replay_lsn() "
                "else pg_current_wal_lsn() end)")
WAL_INSERT_POSITION = ("(case when pg_is_in_recovery() then pg_last_wal_replay_lsn() "
                       "else pg_current_wal_insert_lsn() end)")
