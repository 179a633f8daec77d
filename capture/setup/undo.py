"""A failed start leaves nothing behind: what this run created (publications, its slot, topics,
registry subjects, progress records) is recorded as it is made, and removed again if the start
fails before the snapshot begins to copy. Objects that existed before this run are never
touched (a progress record it rewrote gets its earlier value back)."""

from __future__ import annotations

import logging
from contextlib import contextmanager

from confluent_kafka.admin import AdminClient
from psycopg import sql

from capture.source.database import first_line, session_connect

log = logging.getLogger(__name__)


class Undo:
    def __init__(self, dsn: str, admin: AdminClient, registrar=None, primary: str | None = None):
        self.dsn = dsn  # the source: the slot
        self.primary = primary or dsn  # the publications (a standby source's are its primary's)
        self.admin = admin
        self.publications: list[str] = []
        self.slot: str | None = None
        self.topics: list[str] = []  # shared with Tables, which adds the table topics it makes
        self.ownership = None  # the TopicOwnership of the table topics: tombstoned with them
        self.registrar = registrar  # its subjects created by this run (Registrar.created)
        self.progress = None  # the CaptureState where ``records`` were written
        self.records: dict[str, dict | None] = {}  # keys written -> their value before

    @contextmanager
    def on_failure(self):
        try:
            yield self
        except BaseException:
            self.run()
            raise

    def wrote(self, key: str, before: dict | None) -> None:
        """This run writes progress record ``key``, which held ``before``."""
        self.records.setdefault(key, before)

    def run(self) -> None:
        subjects = list(self.registrar.created) if self.registrar is not None else []
        if not (self.publications or self.slot or self.topics or subjects or self.records):
            return
        log.warning("the start failed: removing what it created (%s)", ", ".join(
            [f"publication {p}" for p in self.publications]
            + ([f"slot {self.slot}"] if self.slot else [])
            + [f"topic {t}" for t in self.topics]
            + [f"registry subject {s}" for s in subjects]
            + [f"progress record {k}" for k in self.records]))
        self._records()
        try:
            if self.slot:
                with session_connect(self.dsn, autocommit=True) as conn:
                    conn.execute("select pg_drop_replication_slot(slot_name) "
                                 "from pg_replication_slots where slot_name = %s", (self.slot,))
            if self.publications:
                with session_connect(self.primary, autocommit=True) as conn:
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
        if subjects:
            try:
                self.registrar.delete_created()
            except Exception as exc:  # noqa: BLE001 - the start's own error comes first
                log.error("could not delete the registry subjects %s: %s; delete them by hand "
                          "(DELETE /subjects/<name>, then ?permanent=true)", ", ".join(subjects),
                          first_line(exc))
        self.publications, self.slot, self.topics[:] = [], None, []

    def _records(self) -> None:
        """The progress records this run wrote get their earlier values back (a tombstone for
        one that was not there), unless their whole topic goes."""
        records, self.records = self.records, {}
        if not records or self.progress is None or self.progress.topic in self.topics:
            return
        try:
            for key, before in records.items():
                if before is None:
                    self.progress.forget([key])
                else:
                    self.progress.write(key, **before)
        except Exception as exc:  # noqa: BLE001 - the start's own error comes first
            log.error("could not restore the progress records %s in %s: %s", ", ".join(records),
                      self.progress.topic, first_line(exc))
