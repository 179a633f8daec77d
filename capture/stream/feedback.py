"""What the stream tells the server: the WAL position Kafka has acknowledged everything up to,
confirmed to the slot (so the server may recycle the WAL before it), and while a long
transaction is replayed, that the capture is still alive."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from capture.health import metrics
from capture.publish.acks import AckTracker

FEEDBACK_INTERVAL = 1.0  # seconds: the slow path to the server for a confirmed position
KEEPALIVE_INTERVAL = 5.0  # seconds: a replayed transaction still answers the server this often


@dataclass(slots=True)
class Positions:
    """Where the stream is in the WAL (ints on the hot path; common/lsn.py's Lsn shows them)."""

    received: int = 0  # the message being handled
    acknowledged: int = 0  # Kafka acknowledged every message up to here (capture/publish/acks.py)
    confirmed: int = 0  # the last position confirmed to the server


class Feedback:
    """Confirms ``positions.acknowledged`` to the server, at most once a FEEDBACK_INTERVAL
    unless forced; ``on_confirmed`` hears each position confirmed."""

    def __init__(self, cursor, tracker: AckTracker, positions: Positions,
                 on_confirmed: Callable[[int], None]):
        self.cursor = cursor
        self.tracker = tracker
        self.positions = positions
        self.on_confirmed = on_confirmed
        self._sent_at = 0.0
        self._keepalive_at = 0.0

    def send(self, between_transactions: bool, force: bool = False) -> None:
        """``between_transactions``: everything read is handled (no transaction open, none
        streamed waiting for its commit)."""
        cur = self.cursor
        if between_transactions:
            # Outside a transaction everything read is handled, and wal_end is the position
            # up to which the server has sent WAL (a keepalive's): an idle slot advances past
            # other databases' WAL, so retained WAL stays bounded. Not while a streamed
            # transaction waits for its commit: the server keeps its WAL anyway (its restart
            # position stays before the transaction's start), so waiting costs nothing.
            self.tracker.idle_at(cur.wal_end)
        now = time.monotonic()
        acknowledged = self.positions.acknowledged = self.tracker.confirmed()
        due = force or now - self._sent_at >= FEEDBACK_INTERVAL
        if acknowledged != self.positions.confirmed and due:
            # force: psycopg2 would otherwise wait for its status interval (10 s) to send it
            cur.send_feedback(flush_lsn=acknowledged, write_lsn=acknowledged, force=True)
            self.positions.confirmed, self._sent_at = acknowledged, now
            metrics.CONFIRMED_LSN.set(acknowledged)
            self.on_confirmed(acknowledged)
        metrics.IN_FLIGHT.set(self.tracker.in_flight)
        metrics.LAG_BYTES.set(max(cur.wal_end - acknowledged, 0))

    def keepalive(self) -> None:
        """While a large transaction is replayed no message is read: tell the server the
        capture lives (else it ends the connection after wal_sender_timeout)."""
        now = time.monotonic()
        if now - self._keepalive_at >= KEEPALIVE_INTERVAL:
            self.cursor.send_feedback(force=True)  # the positions sent before: they only grow
            self._keepalive_at = now
