"""Between transactions, the stream looks for tables whose rows it must publish again: tables
that joined the capture's publications, and DDL that no Relation message brought
(capture/stream/drift.py). Either way an incremental snapshot publishes them, interleaved with
the stream."""

from __future__ import annotations

import logging
import time

from capture.snapshot.incremental import IncrementalSnapshots
from capture.source.database import describe_oids
from capture.source.publication import Watcher
from capture.stream.drift import Drift
from capture.stream.tables import Tables, UnkeyedTable
from common.errors import BottlerError

log = logging.getLogger(__name__)

TABLE_SCAN_INTERVAL = 2.0  # seconds between looks for tables that joined (a catalog query)


class TableWatch:
    def __init__(self, tables: Tables, watcher: Watcher | None, drift: Drift,
                 incremental: IncrementalSnapshots):
        self.tables = tables
        self.watcher = watcher  # keeps the capture's own publications exact (None: the user's)
        self.drift = drift
        self.incremental = incremental
        self._scanned_at = 0.0
        self._drift_at = 0.0

    def between_transactions(self, streamed: int) -> None:
        """Look for both, each at most once a TABLE_SCAN_INTERVAL; ``streamed``: the WAL
        position the stream has passed."""
        self._scan_tables()
        self._check_drift(streamed)

    def republish(self, oid: int, why: str) -> None:
        """DDL changed rows the WAL does not bring again (capture/stream/schema_changes.py):
        the table is published again, interleaved with the stream."""
        codec = self.tables.by_oid(oid)
        if codec.keyed:
            self.incremental.request([oid], why, restart=True)
            return
        # An unkeyed table's topic keeps every row it is sent: a copy would double them.
        log.warning("%s: %s; it has no key, so its rows are not published again: the rows "
                    "already in the views keep what they held", codec.qualified, why)

    def _scan_tables(self) -> None:
        """New tables (and tables whose replica identity changed) join the capture's
        publications. Their rows committed before they joined are not in the stream."""
        if self.watcher is None:
            return
        now = time.monotonic()
        if now - self._scanned_at < TABLE_SCAN_INTERVAL:
            return
        self._scanned_at = now
        joined = self.watcher.changes()
        if joined:
            self.incremental.request([c.oid for c in joined], "it joined the capture")

    def _check_drift(self, streamed: int) -> None:
        """A table whose catalog changed with no Relation message since is taken from the
        catalog, and published again if need be; so is one using an enum type whose value was
        renamed (no Relation message says that)."""
        now = time.monotonic()
        if now - self._drift_at < TABLE_SCAN_INTERVAL:
            return
        self._drift_at = now
        for oid in self.drift.check(streamed):
            try:
                found = describe_oids(self.tables.catalog, [oid], self.drift.generated)
                why = self.tables.described(found[0]) if found else None
            except UnkeyedTable:
                continue  # its next change says so, as --on-error has it
            except BottlerError as exc:  # no longer readable: its snapshot would say the same
                log.warning("%s", exc.message)
                continue
            if why:
                self.republish(oid, why)
        for oid, why in self.tables.relabeled():
            self.republish(oid, why)
