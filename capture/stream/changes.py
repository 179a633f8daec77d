"""Row changes to Kafka: each insert, update and delete encoded with its table's codec and sent
in its transaction's batch. An update whose TOASTed columns the WAL left out is completed from
its old row (REPLICA IDENTITY FULL) or refused; a change Kafka cannot take, or of a table the
capture refused (no key), follows --on-error with the row's text for its dead letter."""

from __future__ import annotations

import logging

from confluent_kafka.admin import AdminClient

from capture.health import metrics
from capture.publish.control import ControlEvents
from capture.publish.encoding import TableCodec, Unencodable
from capture.publish.errors import DataError
from capture.publish.publisher import Publisher
from capture.publish.row import Row
from capture.setup import topics
from capture.snapshot.incremental import IncrementalSnapshots
from capture.source import messages
from capture.source.messages import UNCHANGED
from capture.stream.feedback import Positions
from capture.stream.tables import Tables, UnkeyedTable
from capture.stream.transaction import Transaction

log = logging.getLogger(__name__)


class Changes:
    def __init__(self, tables: Tables, publisher: Publisher, incremental: IncrementalSnapshots,
                 control: ControlEvents, admin: AdminClient, positions: Positions):
        self.tables = tables
        self.publisher = publisher
        self.incremental = incremental
        self.control = control
        self.admin = admin
        self.positions = positions
        # unkeyed tables refused by --on-error: each of their rows follows it too
        self.refused: dict[int, messages.Relation] = {}
        self._counts: dict[tuple[str, str], int] = {}

    def relation(self, m: messages.Relation) -> str | None:
        """A table's description: its codec follows it. Returns why its rows must be published
        again, or None (Tables.relation)."""
        try:
            why = self.tables.relation(m)
        except UnkeyedTable as exc:
            mode = self.publisher.policy.on_error.mode
            if mode == "exit":
                self.publisher.data_error(DataError(str(exc)))  # raises
            log.error("%s; its rows follow --on-error=%s", exc.message, mode)
            self.refused[m.oid] = m
            return None
        self.refused.pop(m.oid, None)  # it has a key now
        return why

    def insert(self, m: messages.Insert, tx: Transaction) -> None:
        self._change(m.relation_oid, m.new, m.new, "insert", tx)

    def delete(self, m: messages.Delete, tx: Transaction) -> None:
        self._change(m.relation_oid, m.old, None, "delete", tx)

    def update(self, m: messages.Update, tx: Transaction) -> None:
        new = m.new
        if UNCHANGED in new:
            if m.old is None or m.old_is_key:
                if m.relation_oid in self.refused:
                    self._change(m.relation_oid, new, new, "update", tx)
                    return
                codec = self.tables.by_oid(m.relation_oid)
                self.publisher.data_error(DataError(
                    f"an update of {codec.qualified} left TOASTed columns untouched and the "
                    "table does not have REPLICA IDENTITY FULL, so the complete row is not in "
                    f"the WAL; run ALTER TABLE {codec.qualified} REPLICA IDENTITY FULL",
                    self._row(codec, new, new, "update", tx), tx.batch))
                return
            new = tuple(o if n is UNCHANGED else n for n, o in zip(new, m.old, strict=True))
        if m.old is not None and m.relation_oid not in self.refused:
            codec = self.tables.by_oid(m.relation_oid)
            if codec.keyed and codec.key(m.old) != codec.key(new):
                self._change(m.relation_oid, m.old, None, "delete", tx)  # the old key is gone
        self._change(m.relation_oid, new, new, "update", tx)

    def truncate(self, m: messages.Truncate, tx: Transaction) -> None:
        """A truncate event per table, with the end offsets of its topic: the views drop what
        came before."""
        self.publisher.flush()  # so the topics' end offsets include every earlier change
        for oid in m.relation_oids:
            if oid in self.refused:
                continue
            codec = self.tables.by_oid(oid)
            self.incremental.truncated(oid)
            schema, table = codec.spec.qualified
            event = self.control.truncate(
                codec.topic, schema, table, tx.final_lsn, tx.commit_time,
                topics.end_offsets(self.admin, codec.topic), m.cascade, m.restart_identity,
            )
            self.publisher.send(self.control.truncate_topic, codec.topic.encode(), event,
                                tx.batch)
            self._count(codec.qualified, "truncate")
        self.publish_counts()

    def publish_counts(self) -> None:
        """The metric, once per transaction: it takes a lock."""
        for (table, op), n in self._counts.items():
            metrics.EVENTS.labels(table, op).inc(n)
        self._counts.clear()

    def codecs(self, oids) -> dict[int, TableCodec]:
        """The codecs of the tables ``oids`` whose rows are published: what replay workers
        encode with (capture/stream/replay.py)."""
        known = ((oid, self.tables.known(oid)) for oid in oids if oid not in self.refused)
        return {oid: codec for oid, codec in known if codec is not None}

    def encoded(self, change: tuple, tx: Transaction) -> None:
        """A change a replay worker encoded with the table's current codec."""
        oid, op, key, value = change
        self._send(oid, self.tables.by_oid(oid), key, value, op, tx)

    def _change(self, oid: int, key_values, values, op: str, tx: Transaction) -> None:
        if oid in self.refused:
            self._refused_row(self.refused[oid], key_values, values, op, tx)
            return
        codec = self.tables.by_oid(oid)
        if values is None and not codec.keyed:
            return  # deletes of unkeyed tables are not published (documented)
        try:
            key = codec.key(key_values)
            value = None if values is None else codec.value(values)
        except Unencodable as exc:
            self.publisher.data_error(DataError(
                str(exc), self._row(codec, key_values, values, op, tx), tx.batch))
            return
        row = None
        if self.publisher.at_risk(key, value):  # Kafka may refuse it: kept for a dead letter
            row = self._row(codec, key_values, values, op, tx)
        self._send(oid, codec, key, value, op, tx, row)

    def _send(self, oid: int, codec: TableCodec, key: bytes | None, value: bytes | None,
              op: str, tx: Transaction, row: Row | None = None) -> None:
        # Where the change is in the WAL: per key, changes come in increasing LSN (a row's
        # writers wait for each other's commits), so a consumer can tell a replayed old
        # change from a new one (the translators' keyed state does).
        headers = [("bottler.lsn", b"%d" % self.positions.received),
                   ("bottler.commit_time", tx.commit_header)]
        self.publisher.send(codec.topic, key, value, tx.batch, headers, row)
        if oid in self.incremental.oids and key is not None:
            self.incremental.touched(oid, key, tx.xid)
        self._count(codec.qualified, op)

    def _count(self, table: str, op: str) -> None:
        # Counted here and added to the metric once per transaction (publish_counts).
        self._counts[(table, op)] = self._counts.get((table, op), 0) + 1

    def _row(self, codec: TableCodec, key_values, values, op: str, tx: Transaction) -> Row:
        """The change as PostgreSQL sent it, for its dead letter."""
        return Row.of(codec.spec, key_values if values is None else values, op,
                      self.positions.received, tx.commit_header)

    def _refused_row(self, m: messages.Relation, key_values, values, op: str,
                     tx: Transaction) -> None:
        """A row of a table the capture refused (no key): it follows --on-error as well."""
        row = Row(f"{m.namespace}.{m.name}", None, tuple(c.name for c in m.columns), (),
                  key_values if values is None else values, op, self.positions.received,
                  tx.commit_header)
        self.publisher.data_error(DataError(
            f"table {m.namespace}.{m.name} has no primary key or replica-identity index, and "
            "--allow-unkeyed is off", row, tx.batch))
