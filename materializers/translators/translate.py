"""One input message of a translator into its open transaction (runner.py): the row change
decoded, the previous row from the keyed state (state.py) where the translator keeps it, the
translator's events encoded and produced, and the state's change produced to its changelog. A
message that cannot be decoded, a translate function that raises, an event its topic's schema
cannot hold: set aside or stopped on by the poison policy (its dead letter in the transaction).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from confluent_kafka import Message, Producer

from materializers.core import metrics as core_metrics
from materializers.core.changes import table_of
from materializers.core.decode import DecodeError, Decoder
from materializers.core.poison import DeadLetters
from materializers.translators.api import RowChange, Source, Translator
from materializers.translators.encoding import EncodeError, EventEncoder
from materializers.translators.state import (
    DELETED,
    LSN_HEADER,
    PARTITION_HEADER,
    KeyedState,
    state_key,
)

log = logging.getLogger(__name__)


class MessageTranslator:
    """Translates the input messages of ``translator`` (the runner named ``name``), producing
    through ``producer()`` (the transactional producer of the moment)."""

    def __init__(self, translator: Translator, decoder: Decoder, state: KeyedState,
                 dead_letters: DeadLetters, changelog: str, encoder: EventEncoder, *,
                 producer: Callable[[], Producer], name: str):
        self.translator = translator
        self.decoder = decoder
        self.state = state
        self.dead_letters = dead_letters
        self.changelog = changelog
        self.encoder = encoder
        self.producer = producer
        self.name = name
        self.events: dict[str, int] = {}  # events of the open transaction, per topic

    def translate(self, msg: Message) -> None:
        """Translate one input message into the open transaction (its events, the keyed
        state's change), or set it aside by the poison policy."""
        try:
            kschema, key = self._decode(msg.key())
            vschema, row = self._decode(msg.value())
            if kschema is None and vschema is None:
                raise DecodeError("a message with neither key nor value")
        except DecodeError as exc:
            self.dead_letters.message(msg, str(exc), "DecodeError")
            return
        before = None
        source = source_of(msg)
        if self.translator.keep_previous and key is not None:
            skey = state_key(msg.topic(), key)
            previous, previous_lsn = self.state.get(skey) or (DELETED, None)
            if source.lsn is not None and previous_lsn is not None and \
                    source.lsn <= previous_lsn:
                return  # a replay of a change translated before (the capture is at-least-once)
            if previous != DELETED:
                before = self._previous_row(msg, previous)
            op = "delete" if row is None else ("update" if before is not None else "insert")
            entry = (DELETED if row is None else msg.value(), source.lsn)
            if entry != (previous, previous_lsn):
                self.state.stage(skey, entry)
                self._produce(self.changelog, skey, entry[0], [
                    (PARTITION_HEADER, str(msg.partition()).encode()),
                    *(() if source.lsn is None else [(LSN_HEADER, str(source.lsn).encode())])])
        else:
            op = "delete" if row is None else ("upsert" if key is not None else "insert")
        writer = vschema if vschema is not None else kschema
        change = RowChange(table_of(writer.schema), op, key, row, before, source)
        try:
            encoded = [self.encoder.encode(e) for e in self.translator.translate(change)]
        except Exception as exc:  # noqa: BLE001 - a failure of this change, by policy
            error = "EncodeError" if isinstance(exc, EncodeError) else type(exc).__name__
            self.dead_letters.message(msg, f"{error}: {exc}", error)
            return
        headers = [
            ("bottler.source.topic", msg.topic().encode()),
            ("bottler.source.partition", str(msg.partition()).encode()),
            ("bottler.source.offset", str(msg.offset()).encode()),
        ]
        for topic, key_bytes, value_bytes in encoded:
            self._produce(topic, key_bytes, value_bytes, headers)
            self.events[topic] = self.events.get(topic, 0) + 1
        core_metrics.CHANGES.labels(self.name, op).inc()

    def _decode(self, data: bytes | None) -> tuple[Any, dict[str, Any] | None]:
        if data is None:
            return None, None
        writer, datum = self.decoder.decode(data)
        if not isinstance(datum, dict):
            raise DecodeError(f"not an Avro record: {type(datum).__name__}")
        return writer, datum

    def _previous_row(self, msg: Message, previous: bytes) -> dict[str, Any] | None:
        try:
            return self._decode(previous)[1]
        except DecodeError as exc:  # its schema is gone from the registry: no previous row
            log.warning("%s: the previous row of %s[%d]@%d cannot be decoded (%s): treated "
                        "as unknown", self.name, msg.topic(), msg.partition(),
                        msg.offset(), exc)
            return None

    def _produce(self, topic: str, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes]] | None = None) -> None:
        while True:
            try:
                self.producer().produce(topic, value, key, headers=headers)
                return
            except BufferError:
                self.producer().poll(0.05)  # the local queue is full: let deliveries drain


def source_of(msg: Message) -> Source:
    """Where a change comes from, as its message and the capture's headers say."""
    lsn = commit_time = None
    for name, value in msg.headers() or ():
        if name == "bottler.lsn":
            lsn = _int(value)
        elif name == "bottler.commit_time":
            commit_time = _int(value)
    timestamp_type, timestamp = msg.timestamp()
    return Source(msg.topic(), msg.partition(), msg.offset(),
                  timestamp if timestamp_type else None, lsn, commit_time)


def _int(value: bytes | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None
