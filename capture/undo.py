"""A failed start leaves nothing behind: what this run created (publications, its slot, topics)
is recorded as it is made, and removed again if the start fails before the snapshot begins to
copy. Objects that existed before this run are never touched."""

from __future__ import annotations

import logging
from contextlib import contextmanager

from confluent_kafka.admin import AdminClient
from psycopg import sql

from capture.source import first_line, session_connect

log = logging.getLogger(__name__)


class Undo:
    def __init__(self, dsn: str, admin: AdminClient):
        self.dsn = dsn
        self.admin = admin
        self.publications: list[str] = []
        self.slot: str | None = None
        self.topics: list[str] = []  # shared with Tables, which adds the table topics it makes
        self.ownership = None  # the TopicOwnership of the table topics: tombstoned with them

    @contextmanager
    def on_failure(self):
        try:
            yield self
        except BaseException:
            self.run()
            raise

    def run(self) -> None:
        if not (self.publications or self.slot or self.topics):
            return
        log.warning("the start failed: removing what it created (%s)", ", ".join(
            [f"publication {p}" for p in self.publications]
            + ([f"slot {self.slot}"] if self.slot else [])
            + [f"topic {t}" for t in self.topics]))
        try:
            with session_connect(self.dsn, autocommit=True) as conn:
                if self.slot:
                    conn.execute("select pg_drop_replication_slot(slot_name) "
                                 "from pg_replication_slots where slot_name = %s", (self.slot,))
                for name in self.publications:
                    conn.execute(sql.SQL("drop publication if exists {}").format(
                        sql.Identifier(name)))
        except Exception as exc:  # noqa: BLE001 - the start's own error is the one to report
            log.error("could not remove %s: %s; remove them by hand (bottler slot drop, "
                      "DROP PUBLICATION)", ", ".join(self.publications + [self.slot or ""]),
                      first_line(exc))
        if self.topics:
            for topic, future in self.admin.delete_topics(list(self.topics)).items():
                try:
                    future.result(timeout=30)
                except Exception as exc:  # noqa: BLE001
                    log.error("could not delete topic %s: %s", topic, exc)
            if self.ownership is not None and self.ownership.state.topic not in self.topics:
                try:
                    self.ownership.forget(list(self.topics))
                except Exception as exc:  # noqa: BLE001 - the start's own error comes first
                    log.error("could not remove the ownership records of %s: %s",
                              ", ".join(self.topics), exc)
        self.publications, self.slot, self.topics[:] = [], None, []
