"""Capture from a hot standby (PostgreSQL 16+): the slot, its exported snapshot and the stream are
the standby's, so decoding costs the primary nothing. A standby is read-only, so whatever the
capture writes (its publications, REPLICA IDENTITY FULL, heartbeats, the watermarks of incremental
snapshots) goes to the primary, named by --primary; the standby must have replayed such a write
before the capture relies on it (catch_up, wait_replayed). The standby keeps the primary from
removing catalog rows its slot still needs only with hot_standby_feedback (docs/operations.md,
capture from a standby)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from capture.source import versions
from capture.source.database import first_line, session_connect
from common.errors import BottlerError
from common.redact import redact

log = logging.getLogger(__name__)

DOC = "docs/operations.md#capture-from-a-standby"
REPLAY_TIMEOUT = 300.0  # seconds a standby may take to replay what the capture wrote
NUDGE_INTERVAL = 1.0  # seconds between running-transactions records asked of the primary


def primary_of(catalog: psycopg.Connection, primary: str | None) -> psycopg.Connection | None:
    """None when the source is itself a primary (--primary then unused: a promoted standby
    carries on). A standby source is checked, and its primary (``primary``, --primary) with it;
    returned: an autocommit connection to the primary, where the capture writes."""
    if not catalog.execute("select pg_is_in_recovery()").fetchone()[0]:
        if primary:
            log.info("the source is a primary: --primary is not used")
        return None
    versions.check_standby_decoding(catalog.info.server_version)
    if catalog.execute("select current_setting('hot_standby_feedback')").fetchone()[0] != "on":
        raise BottlerError(
            "the source is a standby without hot_standby_feedback: the primary would remove "
            "catalog rows its slot still needs, and PostgreSQL would invalidate the slot",
            "on the standby run ALTER SYSTEM SET hot_standby_feedback = on; then SELECT "
            f"pg_reload_conf(); (see {DOC})")
    if not primary:
        raise BottlerError(
            "the source is a standby, which is read-only: what bottler writes (the capture's "
            "publications, heartbeats, snapshot requests, the cutover's fence) goes to the primary",
            f"pass --primary with the primary's DSN, naming the same database (see {DOC})")
    conn = session_connect(primary, autocommit=True)
    try:
        _check_primary(catalog, conn, primary)
    except BaseException:
        conn.close()
        raise
    log.info("the source is a standby: the slot, its snapshot and the stream are its own; the "
             "capture writes on the primary %s", redact(primary))
    return conn


def _check_primary(standby: psycopg.Connection, conn: psycopg.Connection, dsn: str) -> None:
    ask = "select pg_is_in_recovery(), current_database(), current_setting('wal_level')"
    in_recovery, database, wal_level = conn.execute(ask).fetchone()
    if in_recovery:
        raise BottlerError(f"--primary {redact(dsn)} is a standby too",
                           "give the DSN of the primary the standby replicates from")
    if database != standby.info.dbname:
        raise BottlerError(
            f"--primary names database {database}, the source {standby.info.dbname}",
            "name the same database in both DSNs")
    ours, theirs = (c.execute("select system_identifier::text from pg_control_system()")
                    .fetchone()[0] for c in (standby, conn))
    if ours != theirs:
        raise BottlerError(
            f"--primary {redact(dsn)} is not the primary of the source: their system "
            f"identifiers differ ({theirs}, {ours})",
            "give the DSN of the primary the standby replicates from")
    if wal_level != "logical":
        raise BottlerError(
            f"the primary has wal_level = {wal_level}; decoding on its standby needs "
            "wal_level = logical on the primary",
            "on the primary run ALTER SYSTEM SET wal_level = logical; then restart it (a reload "
            f"is not enough), and the standby after it (see {DOC})")
    if (own := standby.execute("select current_setting('wal_level')").fetchone()[0]) != "logical":
        raise BottlerError(
            f"the standby has wal_level = {own}; decoding on a standby needs wal_level = "
            "logical on the standby too",
            "on the standby run ALTER SYSTEM SET wal_level = logical; then restart it (a reload "
            f"is not enough; see {DOC})")


def written(primary: psycopg.Connection) -> str:
    """The primary's WAL position after what this session committed."""
    return primary.execute("select pg_current_wal_lsn()::text").fetchone()[0]


def wait_replayed(standby: psycopg.Connection, lsn: str, what: str) -> None:
    """Wait until the standby has replayed the WAL up to ``lsn`` (``what``: for the error)."""
    timeout = REPLAY_TIMEOUT
    deadline = time.monotonic() + timeout
    ask = "select coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false)"
    while not standby.execute(ask, (lsn,)).fetchone()[0]:
        if time.monotonic() > deadline:
            raise BottlerError(
                f"the standby has not replayed {what} ({lsn} on the primary) in {timeout:.0f} s",
                "check that it streams from the primary: pg_stat_wal_receiver on the standby, "
                "pg_stat_replication on the primary")
        time.sleep(0.05)
    if standby.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
        standby.rollback()


def catch_up(standby: psycopg.Connection, primary: psycopg.Connection, what: str) -> None:
    """The standby has replayed what ``primary`` committed (nothing to wait for when both are
    the same server)."""
    if primary is not standby:
        wait_replayed(standby, written(primary), what)


@contextmanager
def running_xacts(primary: str | None) -> Iterator[None]:
    """While a slot is made on a standby: PostgreSQL waits for a running-transactions record
    from the primary, which the primary logs by itself only every 15 s, and only when busy.
    pg_log_standby_snapshot() on the primary logs one at once, here every second until the slot
    is made. ``primary``: its DSN (None: the source is the primary, nothing to do)."""
    if primary is None:
        yield
        return
    done = threading.Event()
    thread = threading.Thread(target=_nudge, args=(primary, done), daemon=True,
                              name="standby snapshots")
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _nudge(primary: str, done: threading.Event) -> None:
    try:
        with session_connect(primary, autocommit=True) as conn:
            while True:
                conn.execute("select pg_log_standby_snapshot()")
                if done.wait(NUDGE_INTERVAL):
                    return
    except psycopg.errors.InsufficientPrivilege:
        log.warning("this role may not call pg_log_standby_snapshot() on the primary: the slot "
                    "is made once the primary logs a running-transactions record by itself "
                    "(every 15 s while it writes); on the primary a superuser can run GRANT "
                    "EXECUTE ON FUNCTION pg_log_standby_snapshot() TO <role>")
    except (psycopg.Error, BottlerError) as exc:
        log.warning("cannot ask the primary for a running-transactions record: %s",
                    redact(first_line(exc) if isinstance(exc, psycopg.Error) else exc.message))
