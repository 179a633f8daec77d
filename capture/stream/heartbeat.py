"""Heartbeats: a logical decoding message written into the WAL every --heartbeat-interval, so a
slot whose tables are quiet still sees its own database's WAL go by (and the heartbeat topic
tells the views the capture lives)."""

from __future__ import annotations

import logging
import time

import psycopg

log = logging.getLogger(__name__)

HEARTBEAT_PREFIX = "bottler.heartbeat"


class Heartbeats:
    def __init__(self, conn: psycopg.Connection | None, interval: float):
        self.conn = conn  # a plain autocommit connection (None: no heartbeats)
        self.interval = interval
        self._last = 0.0

    def maybe_emit(self) -> None:
        """Write a heartbeat if one is due."""
        due = time.monotonic() - self._last >= self.interval
        if self.conn is None or not due:
            return
        self._last = time.monotonic()
        try:
            self.conn.execute(
                "select pg_logical_emit_message(false, %s, now()::text)", (HEARTBEAT_PREFIX,)
            )
        except psycopg.errors.InsufficientPrivilege:
            self.conn = None
            log.warning("this role may not call pg_logical_emit_message: heartbeats are off; "
                        "the slot still advances on the server's keepalives")
