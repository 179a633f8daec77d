"""The replication slot: creating it with an exported snapshot, its status, dropping it.

psycopg 3 cannot drive the replication protocol (COPY_BOTH) yet; psycopg2's
LogicalReplicationConnection can, so replication connections use psycopg2.
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg2
import psycopg2.extras

from bottler.errors import BottlerError
from bottler.redact import redact
from capture.pgoutput import str_to_lsn
from capture.source import session_connect
from schemas.pgtypes import libpq_options


def replication_connect(dsn: str) -> psycopg2.extensions.connection:
    try:
        return psycopg2.connect(
            dsn,
            connection_factory=psycopg2.extras.LogicalReplicationConnection,
            options=libpq_options(),
            connect_timeout=10,
        )
    except psycopg2.OperationalError as exc:
        reason = redact(str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc))
        if "replication" in reason and ("pg_hba" in reason or "permission" in reason):
            hint = "the role needs the REPLICATION attribute and a pg_hba.conf replication entry"
        else:
            hint = "check the DSN and that the server is up"
        raise BottlerError(f"cannot open a replication connection: {reason}", hint) from None


@dataclass
class NewSlot:
    """A slot just created; ``snapshot`` stays importable while ``conn`` is open and idle."""

    conn: psycopg2.extensions.connection
    consistent_lsn: int
    snapshot: str

    def release(self) -> None:
        self.conn.close()


def create_slot(dsn: str, slot: str) -> NewSlot:
    conn = replication_connect(dsn)
    cur = conn.cursor()
    try:
        cur.execute(f'CREATE_REPLICATION_SLOT "{slot}" LOGICAL pgoutput EXPORT_SNAPSHOT')
    except psycopg2.Error as exc:
        conn.close()
        message = str(exc).strip().splitlines()[0]
        hint = None
        if "all replication slots are in use" in message:
            hint = "raise max_replication_slots, or drop unused slots (bottler slot status)"
        raise BottlerError(f"cannot create replication slot {slot}: {message}", hint) from None
    _, consistent_point, snapshot, _ = cur.fetchone()
    return NewSlot(conn, str_to_lsn(consistent_point), snapshot)


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
                   pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint,
                   pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint,
                   wal_status
            from pg_replication_slots
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
            raise BottlerError(f"replication slot {slot} does not exist")
        if row[0]:
            raise BottlerError(
                f"replication slot {slot} is in use by process {row[0]}",
                "stop the capture that uses it first",
            )
        conn.execute("select pg_drop_replication_slot(%s)", (slot,))

