"""The replication slot: creating it with an exported snapshot, its status, dropping it.

psycopg 3 cannot drive the replication protocol (COPY_BOTH) yet; psycopg2's
LogicalReplicationConnection can, so replication connections use psycopg2.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import psycopg2
import psycopg2.extras

from capture.source.database import SETUP_DOC, session_connect
from common.errors import BottlerError
from common.lsn import Lsn
from common.redact import redact
from schemas.pgtypes import libpq_options


def replication_connect(dsn: str) -> psycopg2.extensions.connection:
    try:
        return psycopg2.connect(
            dsn,
            connection_factory=psycopg2.extras.LogicalReplicationConnection,
            options=libpq_options(),
            connect_timeout=10,
        )
    except psycopg2.Error as exc:
        reason = redact(_first_line(exc))
        raise BottlerError(
            f"cannot open a replication connection to {redact(dsn)}: {reason}",
            _connect_hint(reason),
        ) from None


def _connect_hint(reason: str) -> str:
    if "max_wal_senders" in reason:
        return ("raise max_wal_senders (ALTER SYSTEM SET max_wal_senders = 10; then restart "
                f"PostgreSQL), or stop unused replication connections (see {SETUP_DOC})")
    if "pg_hba" in reason:
        return ("add a pg_hba.conf line for this database and role, e.g. `host <database> "
                "<role> <client address>/32 scram-sha-256` (a logical replication connection "
                "matches the database name, not the `replication` keyword), then reload "
                f"PostgreSQL (see {SETUP_DOC})")
    if "replication role" in reason or "permission denied to start WAL sender" in reason:
        return f"as a superuser run ALTER ROLE <role> REPLICATION; (see {SETUP_DOC})"
    if "password authentication failed" in reason:
        return "check the user and password of the DSN (--postgres / BOTTLER_PG_DSN)"
    return "check the DSN (--postgres / BOTTLER_PG_DSN) and that the server is up"


@dataclass
class NewSlot:
    """A slot just created; ``snapshot`` stays importable while ``conn`` is open and idle."""

    conn: psycopg2.extensions.connection
    consistent_lsn: int
    snapshot: str

    def release(self) -> None:
        self.conn.close()


FAILOVER_SINCE = 170000  # server_version_num: failover slots came with PostgreSQL 17


def failover_wanted(conn: psycopg.Connection, asked: str) -> bool:
    """Whether the capture's slot is to be a failover slot: ``asked`` (--failover) ``on`` or
    ``off``, or ``auto``: where the server can make one (17+, and a primary: a standby's slots
    cannot be failover slots). Asked of a server that cannot, one clear line."""
    if asked == "off":
        return False
    version = conn.info.server_version
    standby = version >= FAILOVER_SINCE and conn.execute("select pg_is_in_recovery()").fetchone()[0]
    if asked == "auto":
        return version >= FAILOVER_SINCE and not standby
    if version < FAILOVER_SINCE:
        raise BottlerError(
            f"failover slots need PostgreSQL 17 or newer; the source runs {version // 10000}",
            "drop --failover on (or set it to auto), or upgrade the source to 17 or newer")
    if standby:
        raise BottlerError(
            "failover slots are made on the primary; the source is a standby",
            "drop --failover on (a standby's copy of a failover slot comes from the primary, "
            "see docs/operations.md, high availability)")
    return True


def create_slot(dsn: str, slot: str, failover: bool = False) -> NewSlot:
    """The slot, with a snapshot exported for its copy; ``failover``: a failover slot (17+)."""
    conn = replication_connect(dsn)
    cur = conn.cursor()
    options = "SNAPSHOT 'export'" + (", FAILOVER true" if failover else "")
    try:
        cur.execute(f'CREATE_REPLICATION_SLOT "{slot}" LOGICAL pgoutput ({options})')
    except psycopg2.Error as exc:
        conn.close()
        message = redact(_first_line(exc))
        hint = None
        if "all replication slots are in use" in message:
            hint = ("raise max_replication_slots (then restart PostgreSQL), or drop unused "
                    "slots (bottler slot status, bottler slot drop)")
        elif "already exists" in message:
            hint = ("another process created it just now: stop the other capture, or choose "
                    "another --slot")
        elif "wal_level" in message:
            hint = ("as a superuser run ALTER SYSTEM SET wal_level = logical; then restart "
                    f"PostgreSQL (see {SETUP_DOC})")
        elif "replication" in message and ("permission" in message or "must be" in message):
            hint = f"as a superuser run ALTER ROLE <role> REPLICATION; (see {SETUP_DOC})"
        raise BottlerError(f"cannot create replication slot {slot}: {message}", hint) from None
    _, consistent_point, snapshot, _ = cur.fetchone()
    return NewSlot(conn, Lsn.parse(consistent_point), snapshot)


@dataclass
class SlotStatus:
    name: str
    active_pid: int | None
    confirmed_lsn: str | None
    retained_wal_bytes: int | None  # WAL kept on the server for this slot
    lag_bytes: int | None  # WAL written but not yet confirmed by the capture
    wal_status: str | None


def slot_status(dsn: str, slot: str | None = None) -> list[SlotStatus]:
    with session_connect(dsn) as conn:
        rows = conn.execute(
            """
            select slot_name, active_pid, confirmed_flush_lsn::text,
                   pg_wal_lsn_diff(w.lsn, restart_lsn)::bigint,
                   pg_wal_lsn_diff(w.lsn, confirmed_flush_lsn)::bigint,
                   wal_status
            from pg_replication_slots,
                 lateral (select case when pg_is_in_recovery() then pg_last_wal_replay_lsn()
                                      else pg_current_wal_lsn() end as lsn) w
            where slot_type = 'logical' and (%s::text is null or slot_name = %s)
            order by slot_name
            """,
            (slot, slot),
        ).fetchall()
    return [SlotStatus(*r) for r in rows]


def slot_exists(dsn: str, slot: str) -> bool:
    return bool(slot_status(dsn, slot))


def drop_slot(dsn: str, slot: str) -> None:
    with session_connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "select active_pid from pg_replication_slots where slot_name = %s", (slot,)
        ).fetchone()
        if row is None:
            raise BottlerError(
                f"replication slot {slot} does not exist",
                "`bottler slot status` lists the slots of this server",
            )
        if row[0]:
            raise _in_use(slot, row[0])
        try:
            conn.execute("select pg_drop_replication_slot(%s)", (slot,))
        except psycopg.errors.ObjectInUse:  # a capture took it since we looked
            pid = conn.execute(
                "select active_pid from pg_replication_slots where slot_name = %s", (slot,)
            ).fetchone()
            raise _in_use(slot, pid[0] if pid else None) from None
        except psycopg.errors.UndefinedObject:
            raise BottlerError(f"replication slot {slot} does not exist",
                               "`bottler slot status` lists the slots of this server") from None
        except psycopg.errors.InsufficientPrivilege as exc:
            raise BottlerError(
                f"cannot drop replication slot {slot}: {redact(_first_line(exc))}",
                "drop it as a role with the REPLICATION attribute, or as a superuser",
            ) from None


def _in_use(slot: str, pid: int | None) -> BottlerError:
    return BottlerError(
        f"replication slot {slot} is in use by process {pid}; it was not dropped",
        "stop the capture that uses it first (a superuser can end a stuck one with "
        f"SELECT pg_terminate_backend({pid});)",
    )


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
