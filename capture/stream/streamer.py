"""The live stream: pgoutput changes from the slot, published to Kafka in commit order, with the
slot's confirmed position advanced only behind Kafka's acknowledgements.

The Streamer is the loop; the work is its collaborators': the row changes (changes.py), the
transactions streamed before they commit (streamed.py), the positions confirmed to the server
(feedback.py), heartbeats (heartbeat.py), the tables to publish again (table_watch.py), and
the incremental snapshots read between transactions (capture/snapshot/incremental.py)."""

from __future__ import annotations

import select
import threading

import psycopg
import psycopg2
from confluent_kafka.admin import AdminClient

from capture.health import metrics
from capture.publish.control import ControlEvents
from capture.publish.publisher import Publisher
from capture.setup.state import CaptureState
from capture.snapshot.incremental import SIGNAL_PREFIX, WATERMARK_PREFIX, IncrementalSnapshots
from capture.source import messages
from capture.source.publication import Watcher
from capture.stream import pgoutput
from capture.stream.changes import Changes
from capture.stream.drift import Drift
from capture.stream.feedback import Feedback, Positions
from capture.stream.heartbeat import HEARTBEAT_PREFIX, Heartbeats
from capture.stream.replay import Encoded, ReplayWorkers
from capture.stream.replication import Replication, StreamOptions, broken_off
from capture.stream.streamed import Streamed
from capture.stream.table_watch import TableWatch
from capture.stream.tables import Tables
from capture.stream.transaction import Transaction

FEEDBACK_EVERY = 2000  # messages between Kafka polls / feedback while busy


class Streamer:
    """Reads the slot until stopped: each message handled in commit order, and between them
    the feedback to the server, heartbeats, the table watch and incremental snapshot chunks."""

    def __init__(self, options: StreamOptions, tables: Tables, control: ControlEvents,
                 publisher: Publisher, admin: AdminClient,
                 heartbeats: psycopg.Connection | None, watcher: Watcher | None = None,
                 progress: CaptureState | None = None):
        """``heartbeats``: a plain autocommit connection to write them; ``watcher``: keeps the
        capture's own publications exact (None: the user's); ``progress``: where incremental
        snapshots record how far they got."""
        self.options = options
        self.control = control
        self.publisher = publisher
        self.tracker = publisher.tracker
        self.positions = Positions()
        self.transaction: Transaction | None = None  # between a Begin and its Commit
        # Tables re-published in chunks between the stream's transactions (new ones, requests).
        self.incremental = IncrementalSnapshots(
            options.dsn, options.slot, tables, options.publications, progress,
            options.chunk_rows, publisher.data_error, publisher.at_risk, options.generated,
            options.primary)
        self.changes = Changes(tables, publisher, self.incremental, control, admin,
                               self.positions)
        self.watch = TableWatch(tables, watcher, Drift(tables.catalog, options.publications,
                                                       tables, options.generated), self.incremental)
        self.heartbeats = Heartbeats(heartbeats, options.heartbeat_interval)
        self.streamed: Streamed | None = None  # with streaming (protocol 2+), once started
        self.feedback: Feedback | None = None  # once started

    def run(self, stop: threading.Event) -> None:
        replication = Replication(self.options)
        metrics.STREAMING.set(1)
        self.feedback = Feedback(replication.cursor, self.tracker, self.positions,
                                 self.incremental.confirmed)
        try:
            if replication.spool is not None:
                self.streamed = Streamed(replication.spool, ReplayWorkers(
                    self.options.replay_workers, self.publisher.at_risk_over))
            self.incremental.load()
            self._loop(replication, stop)
            self.publisher.flush()
            self._feedback(force=True)
            self.incremental.close()
        except (psycopg2.Error, psycopg.Error) as exc:
            raise broken_off(self.options, exc) from None
        finally:
            metrics.STREAMING.set(0)
            if self.streamed is not None:
                self.streamed.close()
            replication.close()

    def _loop(self, replication: Replication, stop: threading.Event) -> None:
        cur, positions, incremental = replication.cursor, self.positions, self.incremental
        streamed = self.streamed
        handled = 0
        while not stop.is_set():
            msg = cur.read_message()
            if msg is not None:
                positions.received = msg.data_start
                if streamed is None or streamed.block_xid is None:
                    self.handle(pgoutput.parse(msg.payload))
                else:
                    streamed.stage(msg.payload, msg.data_start)
                handled += 1
                if handled % FEEDBACK_EVERY == 0:
                    self.publisher.poll(0)
                    self._feedback()
                if self.transaction is None and incremental.queue and incremental.due():
                    incremental.read_chunk()
                continue
            self.publisher.poll(0)
            self._feedback()
            self.heartbeats.maybe_emit()
            if self.transaction is None:
                self.watch.between_transactions(max(positions.received, cur.wal_end))
                if incremental.due():
                    incremental.read_chunk()
                    continue
            _wait_readable(replication.conn, 0.1)

    def _feedback(self, force: bool = False) -> None:
        waiting = self.streamed is not None and self.streamed.waiting
        self.feedback.send(self.transaction is None and not waiting, force)

    # -- messages --------------------------------------------------------------------------
    def handle(self, m) -> None:
        kind = type(m)
        if kind is messages.Insert:
            self.changes.insert(m, self.transaction)
        elif kind is messages.Update:
            self.changes.update(m, self.transaction)
        elif kind is messages.Delete:
            self.changes.delete(m, self.transaction)
        elif kind is messages.Begin:
            self._begin(m)
        elif kind is messages.Commit:
            self._commit(m)
        elif kind is messages.Relation:
            why = self.changes.relation(m)
            if why:
                self.watch.republish(m.oid, why)
        elif kind is messages.Truncate:
            self.changes.truncate(m, self.transaction)
        elif kind is messages.Message:
            self._message(m)
        elif kind is messages.StreamStart:
            self.streamed.start(m)
        elif kind is messages.StreamCommit:
            self._stream_commit(m)
        elif kind is messages.StreamAbort:
            self.streamed.abort(m)
        # Type and Origin messages need nothing: types are read from the catalog by oid.

    def _begin(self, m: messages.Begin) -> None:
        self.transaction = Transaction.begin(m, self.tracker.open())
        if self.options.transaction_topic:
            self._send(self.control.transactions_topic, None,
                       self.control.transaction("BEGIN", m.xid, m.final_lsn, m.commit_time))

    def _commit(self, m: messages.Commit) -> None:
        tx = self.transaction
        if self.options.transaction_topic:
            self._send(self.control.transactions_topic, None,
                       self.control.transaction("COMMIT", tx.xid, m.end_lsn, m.commit_time))
        self.tracker.seal(tx.batch, m.end_lsn)
        self.transaction = None
        self.incremental.committed(m.end_lsn)
        self.changes.publish_counts()
        # a busy stream is seldom idle: between transactions
        self.watch.between_transactions(self.positions.received)

    def _stream_commit(self, m: messages.StreamCommit) -> None:
        """The staged transaction, replayed as the ordinary transaction it is, at its commit's
        place in the stream, inside one Kafka transaction (read_committed readers see all of it
        or nothing); confirmed once that committed, behind Kafka's acknowledgements."""
        changes = self.changes
        with self.publisher.atomically():
            self.handle(messages.Begin(m.lsn, m.commit_time, m.xid))
            tx = self.transaction
            for n, (lsn, message) in enumerate(self.streamed.replay(m, changes.codecs), 1):
                self.positions.received = lsn
                if type(message) is Encoded:
                    changes.encoded(message, tx)
                else:
                    self.handle(message)
                if n % FEEDBACK_EVERY == 0:
                    self.publisher.poll(0)
                    self.feedback.keepalive()
        self.positions.received = m.lsn
        self.handle(messages.Commit(m.flags, m.lsn, m.end_lsn, m.commit_time))
        self.streamed.committed()

    def _message(self, m: messages.Message) -> None:
        if m.prefix == WATERMARK_PREFIX and m.transactional:
            for topic, key, value, row in self.incremental.watermark(m.content):
                self.publisher.send(topic, key, value, self.transaction.batch, row=row)
            return
        if m.prefix == SIGNAL_PREFIX and m.transactional:
            self.incremental.signal(m.content)
            return
        if m.prefix != HEARTBEAT_PREFIX:
            return  # another tool's message (a migration's fence, say)
        event = self.control.heartbeat(self.options.slot, m.lsn, m.content.decode())
        if m.transactional:
            self._send(self.control.heartbeat_topic, None, event)
            return
        batch = self.tracker.open()  # it stands alone
        self.publisher.send(self.control.heartbeat_topic, None, event, batch)
        self.tracker.seal(batch, m.lsn)

    def _send(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.publisher.send(topic, key, value, self.transaction.batch)


def _wait_readable(conn, timeout: float) -> None:
    """Until ``conn`` has data, at most ``timeout`` seconds. poll(), not select(): select()
    refuses a descriptor numbered 1024 or more, which a process with many files open reaches
    (a test session that had run hundreds of captures did)."""
    waiting = select.poll()
    waiting.register(conn, select.POLLIN)
    waiting.poll(timeout * 1000)
