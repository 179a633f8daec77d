"""The mark a replica's seed (``--seed-from``) leaves on the source while it copies, so that the
capture's snapshot of the same database yields to it: a shared advisory lock, held by one
session of each seed for as long as its COPY streams run.

Both read the whole source; the seed copies at ``pg_dump`` speed into one target, the capture's
snapshot encodes every row for Kafka at a fraction of that. Sharing the CPU and disks, each
would slow the other; the seed first finishes in its own time, and the capture's snapshot ends
about when it would have anyway (the same work, done after). The lock is shared (several seeds
may run at once) and is gone with its session, so a seed that crashes does not hold the capture.
``pg_locks`` shows advisory locks to every role, so the capture needs no extra right to see it.
"""

from __future__ import annotations

import psycopg

from common.pg import connect

# pg_advisory_lock_shared(KEY, SUBKEY): pg_locks shows them as classid, objid (objsubid 2)
KEY, SUBKEY = 0x626F7474, 0x73656564  # "bott", "seed"

HOLD = f"select pg_advisory_lock_shared({KEY}, {SUBKEY})"
RUNNING = (
    "select exists (select from pg_locks where locktype = 'advisory' and granted"
    f" and classid = {KEY} and objid = {SUBKEY} and objsubid = 2"
    " and database = (select oid from pg_database where datname = current_database()))"
)


def hold(conn: psycopg.Connection) -> None:
    """Mark the seed as copying until ``conn`` (autocommit) closes."""
    conn.execute(HOLD)


def marker(dsn: str, application_name: str) -> psycopg.Connection:
    """A session of its own on the source holding the mark: closing it releases the mark."""
    conn = connect(dsn, application_name=application_name, autocommit=True)
    hold(conn)
    return conn


def running(conn: psycopg.Connection) -> bool:
    """Whether a seed is copying from the database ``conn`` is connected to."""
    return bool(conn.execute(RUNNING).fetchone()[0])
