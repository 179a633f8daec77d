"""A translator's keyed state: the last row of every input key, so a translator can compare a
row with the one before it (the capture publishes new rows only).

Kept in memory and backed by a compacted changelog topic, like a Kafka Streams state store: the
runner writes each change of the state into the changelog *in the same Kafka transaction* as
the events and the consumed offsets. Whatever the changelog holds for read_committed readers
is therefore exactly the state as of the committed offsets, and a restart (after the new
transactional producer has fenced and aborted its predecessor) restores it by reading the
changelog to its end. The state is not rebuilt from the input topics: compaction may have
removed a row's earlier versions that the committed offsets still need.

Changelog records: key ``<input topic>\\n<primary key as canonical JSON>``, value the input
message's value bytes as read (Confluent-framed Avro), or a tombstone once the row is deleted;
headers: ``bottler.lsn`` (the change's WAL position) and ``bottler.partition`` (the input
partition the row is in). Instances of a translator sharing its group (one changelog) read the
rows of the partitions they gain at each assignment over what they hold (``merge``): the last
instance to hold a partition wrote its rows last, and every key's latest record is in the
changelog (a deleted row's too), so what is read replaces whatever older row was kept.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTopicPartition

from common.errors import BottlerError
from common.kafka import Connection, high_watermarks, reader_config, stable_ends

log = logging.getLogger(__name__)


def state_key(topic: str, key: dict[str, Any]) -> bytes:
    """The changelog key of an input row (canonical JSON: independent of the key's schema
    version and of its field order)."""
    return topic.encode() + b"\n" + json.dumps(
        key, sort_keys=True, separators=(",", ":"), default=str).encode()


Entry = tuple[bytes, "int | None"]
"""(the row's encoded value, ``b""`` for a deleted row; the WAL position of that change)."""
DELETED = b""  # a deleted row: kept with its LSN, so a replayed older change is recognised
LSN_HEADER = "bottler.lsn"
PARTITION_HEADER = "bottler.partition"  # the input partition of the row (older records lack it)


class KeyedState:
    """Committed rows plus the rows staged by the open transaction (``stage``, then
    ``commit`` once the transaction is committed, or ``discard`` if it is aborted). Each row
    comes with the LSN of its change (None where the capture sent none: snapshot rows), which
    the changelog keeps in a ``bottler.lsn`` header."""

    def __init__(self, changelog: str):
        self.changelog = changelog
        self._rows: dict[bytes, Entry] = {}
        self._staged: dict[bytes, Entry | None] = {}

    def __len__(self) -> int:
        return len(self._rows)

    def get(self, key: bytes) -> Entry | None:
        if key in self._staged:
            return self._staged[key]
        return self._rows.get(key)

    def stage(self, key: bytes, entry: Entry | None) -> None:
        self._staged[key] = entry

    def commit(self) -> None:
        for key, value in self._staged.items():
            if value is None:
                self._rows.pop(key, None)
            else:
                self._rows[key] = value
        self._staged.clear()

    def discard(self) -> None:
        self._staged.clear()

    def restore(self, bootstrap: Connection, inputs: set[tuple[str, int]] | None = None,
                merge: bool = False, timeout: float = 300) -> int:
        """Read the changelog (read_committed) from the beginning to its end as it is now,
        once every transaction open in it has ended; the number of records read. Call only
        once this translator's transactional producer is initialised and between two of its
        transactions: then every record of the committed offsets is below that end.

        Reading only to the stable end as it is now would not do: an instance killed in a
        transaction holds the stable end back (until the broker aborts its transaction,
        after ``transaction.timeout.ms``), and the rows its group's live instances committed
        since would be missed, so their orders would look new to whoever takes them.
        ``inputs``: keep only the rows of these input partitions (and records that do not
        say theirs, written before records did); ``merge``: over the rows held, not afresh."""
        if not merge:
            self._rows.clear()
        self._staged.clear()
        consumer = Consumer(reader_config(bootstrap, "translator-state", **{
            "isolation.level": "read_committed", "enable.partition.eof": True}))
        read = 0
        try:
            metadata = consumer.list_topics(timeout=10).topics.get(self.changelog)
            partitions = sorted(metadata.partitions) if metadata else []
            ends = self._settled_ends(bootstrap, partitions, timeout)
            pending = {p for p, end in ends.items() if end > 0}
            consumer.assign([KafkaTopicPartition(self.changelog, p, OFFSET_BEGINNING)
                             for p in pending])
            deadline = time.monotonic() + timeout
            while pending:
                msg = consumer.poll(1.0)
                if msg is None:
                    at = consumer.position([KafkaTopicPartition(self.changelog, p)
                                            for p in pending])
                    pending -= {tp.partition for tp in at if tp.offset >= ends[tp.partition]}
                    if pending and time.monotonic() > deadline:
                        raise BottlerError(f"restoring the state from {self.changelog} timed "
                                           "out", "check the broker")
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    raise KafkaException(error)
                if msg.offset() >= ends[msg.partition()]:
                    pending.discard(msg.partition())  # past the end it set out to read
                    continue
                if msg.offset() + 1 >= ends[msg.partition()]:
                    pending.discard(msg.partition())
                read += 1
                headers = dict(msg.headers() or ())
                if inputs is not None and PARTITION_HEADER in headers and (
                        msg.key().split(b"\n", 1)[0].decode(),
                        int(headers[PARTITION_HEADER])) not in inputs:
                    continue
                if msg.value() is None:
                    self._rows.pop(msg.key(), None)
                else:
                    lsn = headers.get(LSN_HEADER)
                    self._rows[msg.key()] = (msg.value(), int(lsn) if lsn else None)
        finally:
            consumer.close()
        log.info("restored %d rows of state from %s (%d records)", len(self._rows),
                 self.changelog, read)
        return read

    def _settled_ends(self, bootstrap: Connection, partitions: list[int],
                      timeout: float) -> dict[int, int]:
        """The changelog's end offsets as they are now, once a read_committed reader can read
        to them: every transaction that wrote below them committed or aborted."""
        asked = [(self.changelog, p) for p in partitions]
        ends = {p: end for (_, p), end in high_watermarks(bootstrap, asked).items()}
        started, told = time.monotonic(), False
        while True:
            stable = {p: end for (_, p), end in stable_ends(bootstrap, asked).items()}
            if all(stable[p] >= end for p, end in ends.items()):
                return ends
            waited = time.monotonic() - started
            if waited > timeout:
                raise BottlerError(f"a transaction in {self.changelog} stayed open for "
                                   f"{timeout:g} s", "check the broker's transaction.timeout.ms")
            if waited > 2 and not told:
                log.info("waiting for a transaction still open in %s to end (an instance "
                         "killed in it: the broker aborts it after transaction.timeout.ms)",
                         self.changelog)
                told = True
            time.sleep(0.2)
