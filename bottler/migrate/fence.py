"""The cutover's fence: a point in the source's WAL after which nothing is written, and the proof
that the replica applied everything before it.

1. Optionally, the application's roles are fenced out of the source: their connection limit set
   to 0 (``CONNECT`` is usually granted to ``PUBLIC``, so revoking it from one role would not keep
   it out; a connection limit does, and touches nothing else) and their sessions on the source
   database ended. :meth:`RoleFence.restore` gives each role its old limit back.
2. A logical decoding message (``pg_logical_emit_message``, prefix ``bottler.fence``) is written;
   it returns its WAL position. The capture confirms a position on its slot only once Kafka
   acknowledged every change before it, and advances an idle slot to the end of the WAL the
   server sent (capture/publish/acks.py): once ``confirmed_flush_lsn`` passes the fence, every
   change before it is in Kafka.
3. The table topics' end offsets at that moment are the fence positions. The replica has applied
   everything before the fence once the offsets it stored with its data (the sink's
   ``stored_offsets``) reach them in every partition.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from bottler.migrate.status import watermarks
from common.errors import BottlerError
from common.kafka import Connection
from common.lsn import Lsn
from common.pg import connect
from common.redact import redact
from materializers.postgres.sink import PostgresSink

FENCE_PREFIX = "bottler.fence"
POLL = 0.2  # seconds between two looks at the slot or the replica's offsets

Positions = dict[tuple[str, int], int]  # (topic, partition) -> offset


@dataclass
class RoleFence:
    """The application's roles kept out of the source: connection limit 0, sessions ended."""

    dsn: str
    roles: list[str]
    saved: dict[str, int] = field(default_factory=dict)  # role -> its connection limit before
    ended: int = 0  # sessions ended

    def check(self, conn: psycopg.Connection) -> list[str]:
        """Problems that would make the fence fail or not hold, one line each."""
        problems = []
        for role in self.roles:
            row = conn.execute("select rolsuper from pg_roles where rolname = %s",
                               (role,)).fetchone()
            if row is None:
                problems.append(f"fence role {role} does not exist in the source")
            elif row[0]:
                problems.append(f"fence role {role} is a superuser: a connection limit does "
                                "not keep it out")
        if conn.execute("select current_user = any(%s)", (self.roles,)).fetchone()[0]:
            problems.append("the cutover's own role is among the fence roles")
        return problems

    def apply(self, timeout: float = 30) -> None:
        with connect(self.dsn, autocommit=True) as conn:
            for role in self.roles:
                limit = conn.execute("select rolconnlimit from pg_roles where rolname = %s",
                                     (role,)).fetchone()[0]
                self.saved.setdefault(role, limit)
                conn.execute(sql.SQL("alter role {} connection limit 0").format(
                    sql.Identifier(role)))
            deadline = time.monotonic() + timeout
            while True:
                pids = [r[0] for r in conn.execute(
                    """select pid from pg_stat_activity where datname = current_database()
                       and usename = any(%s) and pid <> pg_backend_pid()""",
                    (self.roles,)).fetchall()]
                if not pids:
                    return
                if time.monotonic() > deadline:
                    raise BottlerError(f"sessions of {', '.join(self.roles)} on the source "
                                       f"survived pg_terminate_backend for {timeout:.0f}s",
                                       "end them by hand and run the cutover again")
                for pid in pids:
                    if conn.execute("select pg_terminate_backend(%s)", (pid,)).fetchone()[0]:
                        self.ended += 1
                time.sleep(POLL)

    def restore(self) -> None:
        if not self.saved:
            return
        with connect(self.dsn, autocommit=True) as conn:
            for role, limit in self.saved.items():
                conn.execute(sql.SQL("alter role {} connection limit {}").format(
                    sql.Identifier(role), sql.Literal(limit)))
        self.saved.clear()


def emit(conn: psycopg.Connection, label: str) -> Lsn:
    """Write a fence message into the source's WAL; its position."""
    content = json.dumps({"fence": label, "at": time.time()})
    try:
        text = conn.execute("select pg_logical_emit_message(false, %s, %s)::text",
                            (FENCE_PREFIX, content)).fetchone()[0]
    except psycopg.Error as exc:
        raise BottlerError(f"cannot write the fence into the source's WAL: "
                           f"{redact(str(exc).strip())}",
                           "the cutover's role needs EXECUTE on pg_logical_emit_message "
                           "(a superuser or REPLICATION role has it)") from None
    return Lsn.parse(text)


def slot_confirmed(conn: psycopg.Connection, slot: str) -> tuple[Lsn | None, bool] | None:
    """(confirmed_flush_lsn, active) of the slot, None if there is no such slot."""
    row = conn.execute("select confirmed_flush_lsn::text, active from pg_replication_slots "
                       "where slot_name = %s", (slot,)).fetchone()
    if row is None:
        return None
    return (Lsn.parse(row[0]) if row[0] else None), row[1]


def wait_until(check: Callable[[], object], timeout: float, what: str, hint: str):
    deadline = time.monotonic() + timeout
    while True:
        if result := check():
            return result
        if time.monotonic() > deadline:
            raise FenceTimeout(f"timed out after {timeout:.0f}s waiting for {what}", hint)
        time.sleep(POLL)


class FenceTimeout(BottlerError):
    pass


def wait_published(conn: psycopg.Connection, slot: str, lsn: int, timeout: float) -> None:
    """Until the capture has confirmed ``lsn`` on its slot: every change before it is in Kafka."""
    def confirmed() -> bool:
        state = slot_confirmed(conn, slot)
        if state is None:
            raise BottlerError(f"the replication slot {slot} is gone from the source",
                               "the capture must run until the cutover says go")
        return state[0] is not None and state[0] >= lsn

    wait_until(confirmed, timeout, f"the capture to confirm the fence {Lsn(lsn)} on slot "
               f"{slot}", "check that the capture is running and can reach Kafka "
               "(bottler slot status)")


def end_positions(broker: Connection, topics: set[str]) -> tuple[Positions, Positions]:
    """(end offsets, start offsets) of every partition of those ``topics`` that exist."""
    ends, starts = {}, {}
    for topic, marks in watermarks(broker, topics).items():
        for partition, (low, high) in marks.items():
            ends[(topic, partition)] = high
            starts[(topic, partition)] = low
    return ends, starts


def behind(positions: Positions, starts: Positions, stored: Positions) -> Positions:
    """Partitions where the replica's stored offset has not reached the fence: -> messages."""
    out = {}
    for tp, end in positions.items():
        applied = max(stored.get(tp, 0), starts.get(tp, 0))
        if applied < end:
            out[tp] = end - applied
    return out


def wait_applied(target_dsn: str, group: str, positions: Positions, starts: Positions,
                 timeout: float) -> None:
    """Until the replica's stored offsets (asked of the sink, as the replica reads them) pass
    the fence positions in every partition."""
    sink = PostgresSink(target_dsn, group)
    try:
        def applied() -> bool:
            return not behind(positions, starts, sink.stored_offsets(list(positions)))

        wait_until(applied, timeout, "the replica to apply everything before the fence",
                   "check that `bottler materialize postgres` runs against the target with "
                   f"--group {group} (bottler migrate status shows its lag)")
    finally:
        sink.close()


def stored(target_dsn: str, group: str, partitions: list[tuple[str, int]]) -> Positions:
    sink = PostgresSink(target_dsn, group)
    try:
        return sink.stored_offsets(partitions) or {}
    finally:
        sink.close()
