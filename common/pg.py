"""Connecting to PostgreSQL with errors a user can act on (and no password in them)."""

from __future__ import annotations

import psycopg

from common.errors import BottlerError
from common.redact import redact


def connect(dsn: str, **kwargs) -> psycopg.Connection:
    try:
        return psycopg.connect(dsn, connect_timeout=10, **kwargs)
    except psycopg.OperationalError as exc:
        reason = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
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
