"""Slot safety: the WAL the capture's slot makes the source keep, and a slot PostgreSQL gave up.

A slot keeps every WAL segment from its restart_lsn on, so a capture that is stopped or behind
makes the source's disk fill. The watch reads the slot's retained WAL, `safe_wal_size` (how much
more WAL may be written before PostgreSQL invalidates the slot, under max_slot_wal_keep_size)
and `wal_status` every few seconds, exports them, and warns past the thresholds.

An invalidated slot (`wal_status = lost`) cannot stream again: the changes since its confirmed
position are gone from the server. So are they when the server has no slot of that name while
the capture's progress records say it streamed from one: a standby promoted without a
synchronized copy of the failover slot, or the slot dropped by hand (a gone slot). The
recovery (--recover-lost-slot) voids what the table topics hold with a truncate event per table
(every view drops the table's rows as of that point, docs/capture.md#topics), drops a lost slot
and starts over: a new slot and a snapshot of every table. The views then end equal to the
source, deletes made while the slot was lost included.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

import psycopg
import psycopg2
from confluent_kafka.admin import AdminClient

from capture.health import metrics
from capture.publish.control import ControlEvents
from capture.settings import CaptureSettings
from capture.setup import topics
from capture.setup.state import CaptureState
from capture.source.database import SourceTable
from capture.source.messages import unix_micros_to_pg_time
from capture.source.slot import drop_slot, slot_exists
from common.errors import BottlerError
from common.lsn import Lsn
from common.pg import WAL_POSITION
from schemas import progress as progress_records
from schemas.topics import table_topic

log = logging.getLogger(__name__)

CHECK_INTERVAL = 10.0  # seconds between looks at the slot
WARN_EVERY = 600.0  # seconds between repeated warnings while a threshold stays crossed
MIB = 1024 * 1024
DOC = "docs/operations.md#slot-safety"
GONE_DOC = "docs/operations.md#high-availability"  # a slot missing after a failover
WAL_STATUSES = ("reserved", "extended", "unreserved", "lost")

QUERY = f"""
select wal_status,
       pg_wal_lsn_diff({WAL_POSITION}, restart_lsn)::float8,
       safe_wal_size::float8
from pg_replication_slots where slot_name = %s
"""


@dataclass
class SlotReading:
    wal_status: str | None
    retained: float | None  # bytes; None once lost (no restart_lsn)
    safe: float | None  # bytes; None without max_slot_wal_keep_size


class SlotProbe:
    """Reads the slot's figures on one kept connection; None when it cannot (the capture
    reports connection trouble itself)."""

    def __init__(self, dsn: str, slot: str):
        self.dsn, self.slot = dsn, slot
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()

    def read(self) -> SlotReading | None:
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=3,
                                                 application_name="bottler capture slot watch")
                row = self._conn.execute(QUERY, (self.slot,)).fetchone()
            except psycopg.Error:
                self.close()
                return None
        return None if row is None else SlotReading(*row)

    def retained_wal(self) -> float:
        reading = self.read()
        return float("nan") if reading is None or reading.retained is None else reading.retained

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None


class SlotWatch:
    """Exports the slot's figures and warns past the thresholds, in a thread of its own."""

    def __init__(self, dsn: str, slot: str, warn_retained: int, warn_safe: int,
                 interval: float = CHECK_INTERVAL):
        self.probe = SlotProbe(dsn, slot)
        self.slot = slot
        self.warn_retained, self.warn_safe = warn_retained, warn_safe
        self.interval = interval
        self._warned: dict[str, float] = {}  # condition -> when last warned
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="slot watch")

    def start(self) -> SlotWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.probe.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.check(self.probe.read())
            self._stop.wait(self.interval)

    def check(self, reading: SlotReading | None) -> None:
        if reading is None:  # not there (yet), or the server did not answer
            metrics.SLOT_RETAINED_WAL.set(float("nan"))
            metrics.SLOT_SAFE_WAL.set(float("nan"))
            return
        nan = float("nan")
        metrics.SLOT_RETAINED_WAL.set(nan if reading.retained is None else reading.retained)
        metrics.SLOT_SAFE_WAL.set(nan if reading.safe is None else reading.safe)
        for status in WAL_STATUSES:
            metrics.SLOT_WAL_STATUS.labels(status).set(int(reading.wal_status == status))
        if reading.wal_status == "lost":
            self._warn("lost", logging.ERROR, str(lost_slot_error(self.slot)))
            return
        if reading.retained is not None and reading.retained >= self.warn_retained:
            self._warn("retained", logging.WARNING,
                       f"slot {self.slot} makes the source keep {_size(reading.retained)} of WAL "
                       f"(warning from {_size(self.warn_retained)}, --slot-warn-retained-mb): "
                       "the capture is behind or was stopped, and the WAL grows until it "
                       f"catches up; see {DOC}")
        else:
            self._cleared("retained")
        low = reading.safe is not None and reading.safe < self.warn_safe
        if low or reading.wal_status == "unreserved":
            left = "no" if reading.safe is None else _size(max(reading.safe, 0))
            self._warn("safe", logging.WARNING,
                       f"slot {self.slot} is close to being invalidated: {left} more WAL may "
                       f"be written before PostgreSQL gives it up (max_slot_wal_keep_size; "
                       f"wal_status {reading.wal_status}, warning under "
                       f"{_size(self.warn_safe)}, --slot-warn-safe-mb); let the capture catch "
                       f"up, or raise max_slot_wal_keep_size; see {DOC}")
        else:
            self._cleared("safe")

    def _warn(self, condition: str, level: int, message: str) -> None:
        now = time.monotonic()
        if now - self._warned.get(condition, -WARN_EVERY) >= WARN_EVERY:
            self._warned[condition] = now
            log.log(level, "%s", message)

    def _cleared(self, condition: str) -> None:
        if self._warned.pop(condition, None) is not None:
            log.info("slot %s: back under the %s WAL threshold", self.slot, condition)


# -- a lost slot ---------------------------------------------------------------------------------

def lost_slot_error(slot: str) -> BottlerError:
    return BottlerError(
        f"replication slot {slot} was invalidated by PostgreSQL (wal_status = lost): it kept "
        "more WAL than max_slot_wal_keep_size allows, and the changes it had not confirmed are "
        "gone from the server",
        f"run the capture again with --recover-lost-slot (`bottler capture --slot {slot} "
        "--recover-lost-slot` and your other options): it resets every table's topic and "
        f"snapshots it again, so the views end equal to the source; see {DOC}",
    )


def gone_slot_error(conn: psycopg.Connection, slot: str) -> BottlerError:
    where = f"{conn.info.host}:{conn.info.port}"
    return BottlerError(
        f"replication slot {slot} is missing on the server the capture reached ({where}), but "
        "the capture streamed from it before (its progress records say so): likely a standby "
        "promoted without a synchronized copy of the failover slot, or the slot was dropped; "
        "the changes since its last confirmed position are out of reach",
        "if this is the server to capture from, run the capture again with --recover-lost-slot "
        "and your other options: it resets every table's topic and snapshots it again, so the "
        f"views end equal to the source; else point --postgres at the server with the slot; see "
        f"{GONE_DOC}",
    )


def is_gone(conn: psycopg.Connection, slot: str, progress: CaptureState,
            admin: AdminClient) -> bool:
    """The server has no slot ``slot``, and the progress records say the capture made it (its
    snapshot planned, complete or skipped): it streamed before. A first start has no such
    record (nor, often, a progress topic)."""
    if conn.execute("select 1 from pg_replication_slots where slot_name = %s",
                    (slot,)).fetchone():
        return False
    if progress.topic not in admin.list_topics(timeout=10).topics:  # never one by name
        return False
    return progress_records.slot_and_topics_made(progress.read(slot) or {})


def is_lost(conn: psycopg.Connection, slot: str) -> bool:
    row = conn.execute("select wal_status from pg_replication_slots where slot_name = %s",
                       (slot,)).fetchone()
    return row is not None and row[0] == "lost"


def lost_while_streaming(dsn: str, slot: str, exc: BaseException) -> bool:
    """Did streaming fail because the slot was invalidated? START_REPLICATION refuses a lost
    slot (PostgreSQL 15: `cannot read from logical replication slot "s"` with the detail `This
    slot has been invalidated because it exceeded the maximum reserved size.`; 16 and later:
    `can no longer get changes from replication slot "s"`), and the checkpointer ends the
    connection of an active slot it invalidates: then the slot's status says it."""
    text = str(exc)
    if isinstance(exc, psycopg2.Error) and exc.pgcode == "55000" and "invalidated" in text:
        return True
    try:
        with psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn:
            return is_lost(conn, slot)
    except psycopg.Error:
        return False  # the server is away: the connection error says so


def recover(s: CaptureSettings, admin: AdminClient, control: ControlEvents,
            published: list[SourceTable]) -> None:
    """Void what each published table's topic holds (a truncate event, which every view
    applies), then drop the lost slot (a gone one has nothing to drop); the start that follows
    makes a new slot and snapshots every table. In this order a crash in between is harmless:
    until the new slot is made, the next run recovers again."""
    from capture.publish.publisher import Publisher

    topics.ensure_topics(admin, [], [control.truncate_topic],
                         config={**s.topic_config, "retention.ms": "-1"})
    existing = set(admin.list_topics(timeout=10).topics)  # never ask for one topic by name
    publisher = Publisher(s.broker, s.kafka_config, track=False)
    lsn = _current_lsn(s.postgres)
    voided = []
    for table in published:
        topic = table_topic(s.topic_prefix, table.schema, table.name)
        if topic not in existing:
            continue
        event = control.truncate(topic, table.schema, table.name, lsn, _pg_now(),
                                 topics.end_offsets(admin, topic), False, False)
        publisher.send(control.truncate_topic, topic.encode(), event)
        voided.append(table.qualified)
    publisher.flush()
    log.warning("slot %s was lost: voided the topics of %d tables (%s) with truncate events; "
                "then a new slot and a snapshot of every table", s.slot, len(voided),
                ", ".join(voided) or "none")
    if slot_exists(s.postgres, s.slot):  # invalidated; a gone slot has nothing to drop
        drop_slot(s.postgres, s.slot)


def _current_lsn(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        return Lsn.parse(conn.execute(f"select {WAL_POSITION}::text").fetchone()[0])


def _pg_now() -> int:
    """Now, in microseconds since PostgreSQL's epoch (2000-01-01), as commit times are."""
    return unix_micros_to_pg_time(int(time.time() * 1_000_000))


def _size(n: float) -> str:
    return f"{n / MIB:,.0f} MiB"
