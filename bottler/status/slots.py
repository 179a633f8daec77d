"""The source database's replication slots and the WAL each one holds back."""

from __future__ import annotations

import psycopg

from bottler.status.figures import Slot, Unavailable
from common.redact import redact

# Retained WAL: what the server may not recycle for the slot (it fills the disk if the slot's
# consumer is gone). Confirmed lag: what the consumer has not confirmed yet.
SLOTS = """
with here(lsn) as (
  select case when pg_is_in_recovery() then pg_last_wal_replay_lsn() else pg_current_wal_lsn() end
)
select slot_name, database, active,
       pg_wal_lsn_diff(here.lsn, restart_lsn)::bigint,
       pg_wal_lsn_diff(here.lsn, confirmed_flush_lsn)::bigint,
       wal_status, {failover}
from pg_replication_slots, here
order by slot_name
"""
# PostgreSQL 17+: whether a slot is a failover slot, and on a standby whether it is the copy
# sync_replication_slots keeps of the primary's (a capture can resume from it once promoted)
FAILOVER_COLUMNS = {True: "failover, synced", False: "null::bool, null::bool"}


class SlotReader:
    """Reads every replication slot of the server, keeping one connection between reads."""

    def __init__(self, dsn: str, timeout: float = 3.0):
        self.dsn = dsn
        self.timeout = timeout
        self._conn: psycopg.Connection | None = None

    def read(self) -> list[Slot]:
        """The slots; raises :class:`Unavailable` with a redacted reason."""
        has_failover = self.connection().info.server_version >= 170000
        return [Slot(*row) for row in self.query(
            SLOTS.format(failover=FAILOVER_COLUMNS[has_failover]))]

    def connection(self) -> psycopg.Connection:
        """The kept connection (opened again if it was lost)."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self.dsn, autocommit=True, connect_timeout=max(1, round(self.timeout)),
                    application_name="bottler status")
            return self._conn
        except psycopg.Error as exc:
            raise self._unavailable(exc) from None

    def query(self, sql: str) -> list[tuple]:
        """The rows of ``sql``; raises :class:`Unavailable` with a redacted reason."""
        conn = self.connection()
        try:
            return conn.execute(sql).fetchall()
        except psycopg.Error as exc:
            raise self._unavailable(exc) from None

    def _unavailable(self, exc: psycopg.Error) -> Unavailable:
        self.close()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return Unavailable(f"PostgreSQL at {redact(self.dsn)}: {redact(first)}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
