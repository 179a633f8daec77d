"""A seed's progress: each table's ranges counted as they commit, the last one marking the table
done in ``bottler.seeds``; the tables that could not be seeded handed over to their topics."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Protocol

import psycopg

from materializers.postgres.ddl import qualified
from materializers.postgres.seeding.handover import DONE, NOT_SEEDED
from materializers.postgres.seeding.tables import SeedTable, add_key

log = logging.getLogger(__name__)

PROGRESS_EVERY = 10.0  # seconds between progress lines while a table is copied


class Counted(Protocol):
    """What the progress updates of its seed: its group and its count of rows copied."""

    group_id: str
    rows: int


class Progress:
    """Counts each table's ranges as they commit; the last one marks the table done."""

    def __init__(self, seeder: Counted, skip_below: int, snapshot_lsn: int,
                 starts: dict[str, dict[int, int]], tables: list[SeedTable]):
        self.seeder = seeder
        self.skip_below = skip_below
        self.snapshot_lsn = snapshot_lsn
        self.starts = starts
        self.tables = tables
        self.lock = threading.Lock()
        self.said = time.monotonic()

    def chunk(self, target: psycopg.Connection, table: SeedTable, rows: int) -> None:
        with self.lock:  # held over the commit: exactly one range is the last
            table.rows += rows
            self.seeder.rows += rows
            table.chunks -= 1
            if table.chunks == 0 and table.failed is None and table.deferred_key:
                try:
                    built = time.monotonic()
                    add_key(target, table.id, table.deferred_key)
                    log.info("seed: %s: primary key built in %.1f s", table.id,
                             time.monotonic() - built)
                except psycopg.Error as exc:
                    target.rollback()
                    table.failed = ("its primary key could not be built after the copy:"
                                    f" {exc.diag.message_primary or exc}")
                    return
            if table.chunks == 0 and table.failed is None:
                target.execute(
                    "update bottler.seeds set state = %s, skip_below = %s, snapshot_lsn = %s,"
                    " start_offsets = %s, rows = %s, reason = null, seeded_at = now()"
                    " where group_id = %s and topic = %s",
                    (DONE, self.skip_below, self.snapshot_lsn,
                     json.dumps(self.starts[table.topic]), table.rows,
                     self.seeder.group_id, table.topic))
            target.commit()
            if table.chunks == 0 and table.failed is None:
                log.info("seed: %s: %d rows copied", table.id, table.rows)
            elif time.monotonic() - self.said >= PROGRESS_EVERY:
                log.info("seed: %s: %d of %d ranges copied (%d rows so far, %d in all)",
                         table.id, table.ranges - table.chunks, table.ranges, table.rows,
                         self.seeder.rows)
                self.said = time.monotonic()

    def fail(self, table: SeedTable, reason: str) -> None:
        with self.lock:
            table.failed = table.failed or reason

    def finish_failed(self, target: psycopg.Connection) -> None:
        """Tables that cannot be seeded are emptied (what ranges copied) and read from their
        topics, from offset 0."""
        for table in self.tables:
            if table.failed is None:
                continue
            log.warning("seed: %s not seeded: %s; its rows come from %s", table.id,
                        table.failed, table.topic)
            if table.columns:
                target.execute(f"truncate {qualified(table.id)}")
                if table.deferred_key:
                    add_key(target, table.id, table.deferred_key)
            target.execute("update bottler.seeds set state = %s, reason = %s"
                           " where group_id = %s and topic = %s",
                           (NOT_SEEDED, table.failed, self.seeder.group_id, table.topic))
            target.commit()

