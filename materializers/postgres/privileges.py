"""The target role's missing privileges: one line naming the privilege, and the GRANT to run.

The replica needs, in the target database: CREATE on the database (its bookkeeping schema
``bottler``, and the source's schemas other than ``public``), USAGE and CREATE on the schemas of
the tables it creates, and for a table it adopts, the rights to write it and to own it (ALTER
TABLE, to add the source's columns). PostgreSQL's refusal is turned into
:class:`MissingPrivilege`, which the command prints as one line with the GRANT.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from common.errors import BottlerError
from materializers.postgres.ddl import quote as always_quoted

_DENIED = re.compile(r"permission denied for (database|schema|table|relation|sequence) (.+)")
_GRANTS = {
    "database": "grant create on database {name} to {role}",
    "schema": "grant usage, create on schema {name} to {role}",
    "table": "grant select, insert, update, delete, truncate on table {name} to {role}",
    "relation": "grant select, insert, update, delete, truncate on table {name} to {role}",
    "sequence": "grant usage on sequence {name} to {role}",
}


def quote(name: str) -> str:
    """An identifier as one would type it: quoted only when it must be."""
    return name if re.fullmatch(r"[a-z_][a-z0-9_$]*", name) else always_quoted(name)


class MissingPrivilege(BottlerError):
    """The target role may not do what the replica needs."""


def explain(exc: psycopg.errors.InsufficientPrivilege, role: str) -> MissingPrivilege:
    message = exc.diag.message_primary or str(exc).splitlines()[0]
    denied = _DENIED.fullmatch(message)
    if denied:
        kind, name = denied.groups()
        hint = "run, as the owner or a superuser: " + _GRANTS[kind].format(
            name=quote(name), role=quote(role))
    elif message.startswith("must be owner of"):
        hint = (f"the replica alters the tables it writes (the source's new columns): make"
                f" {quote(role)} their owner (alter table … owner to {quote(role)})")
    else:
        hint = "grant the target role that privilege (see docs/migration.md, Privileges)"
    return MissingPrivilege(f"the target role {role} lacks a privilege: {message}", hint)


@contextmanager
def explained(conn: psycopg.Connection) -> Iterator[None]:
    """Turn PostgreSQL's refusal of a privilege into :class:`MissingPrivilege`."""
    try:
        yield
    except psycopg.errors.InsufficientPrivilege as exc:
        raise explain(exc, conn.info.user) from None
