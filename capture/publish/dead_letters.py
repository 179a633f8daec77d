"""What a row the capture cannot publish does (--on-error): stop (`exit`), skip it with an error
line (`log`), or send it whole to the capture's dead-letter topic (`dead-letter`, the default)
and go on.

A dead letter is a JSON object, so any consumer reads it: the table, the operation, the key and
each column's PostgreSQL text, the WAL position, the reason. It counts in the batch (acks.py) of
the row it replaces: the WAL position of that row is confirmed to PostgreSQL only once Kafka has
acknowledged the dead letter. A dead letter Kafka refuses stops the capture: nothing past it is
confirmed, so the restart tries the row again.

Dead letters have their own producer, with a higher size limit than the rows' (a row refused
for its size makes a dead letter at least as large); it is created at the first dead letter.
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from confluent_kafka import KafkaException, Producer

from capture.health import metrics
from capture.publish.errors import producer_failed
from capture.publish.producer_config import BASE_CONFIG
from common.errors import BottlerError
from common.kafka import client_config
from schemas.topics import CAPTURE_DEAD_LETTER, with_prefix

if TYPE_CHECKING:
    from capture.publish.acks import Batch
    from capture.publish.errors import DataError
    from capture.publish.row import Row

log = logging.getLogger(__name__)

# The dead-letter topic's max.message.bytes, and its producer's message.max.bytes: a row larger
# than this (compressed) cannot be dead-lettered, and stops the capture.
MAX_BYTES = 64 * 1024 * 1024
MODES = ("exit", "log", "dead-letter")


@dataclass(frozen=True)
class OnError:
    """--on-error and where its dead letters go; plain data, so snapshot workers receive it."""

    mode: str = "exit"
    topic: str = ""  # the dead-letter topic (mode dead-letter)
    slot: str = ""

    @classmethod
    def of(cls, mode: str, prefix: str, slot: str) -> OnError:
        return cls(mode, with_prefix(prefix, CAPTURE_DEAD_LETTER), slot)

    def topic_config(self, topic_config: dict[str, str]) -> dict[str, str]:
        """The dead-letter topic's settings: the user's -T, but for its size limit; kept
        forever (a dead letter waits for someone to handle it)."""
        return {**topic_config, "retention.ms": "-1", "max.message.bytes": str(MAX_BYTES)}


class ErrorPolicy:
    """Applies --on-error to a DataError (capture/publish/errors.py), which carries what is known
    of the row: ``row`` (its text), ``batch`` (where its acknowledgement counts) and ``refused``
    (the key and value Kafka refused)."""

    def __init__(self, on_error: OnError, bootstrap: str = "",
                 extra_config: dict[str, str] | None = None):
        self.on_error = on_error
        self.bootstrap = bootstrap
        self.extra = extra_config or {}
        self._producer: Producer | None = None
        self._failed: list[str] = []  # dead letters Kafka refused: the capture stops

    @property
    def topic(self) -> str:
        return self.on_error.topic

    def __call__(self, error: DataError) -> None:
        mode = self.on_error.mode
        if mode == "exit":
            raise BottlerError(str(error), "or pass --on-error=dead-letter to send such rows to "
                               f"{self.topic or 'the dead-letter topic'} and go on")
        if mode == "log":
            metrics.DATA_ERRORS.inc()
            log.error("skipped (--on-error=log): %s", error)
            return
        self._send(error)

    def _send(self, error: DataError) -> None:
        row: Row | None = error.row
        record = (row.record(str(error), self.on_error.slot) if row is not None
                  else {"table": None, "op": None, "key": None, "columns": None,
                        "reason": str(error), "slot": self.on_error.slot})
        headers = []
        if row is not None and row.lsn is not None:
            headers.append(("bottler.lsn", b"%d" % row.lsn))
        if row is not None and row.commit_time:
            headers.append(("bottler.commit_time", row.commit_time))
        if error.refused is not None:  # what Kafka refused: the row, encoded
            key, value = error.refused
            record["refused"] = {"key": _b64(key), "value": _b64(value)}
        key = json.dumps({"table": record["table"], "key": record["key"]},
                         separators=(",", ":")).encode()
        value = json.dumps(record, separators=(",", ":")).encode()
        batch: Batch | None = error.batch
        if batch is not None:
            batch.pending += 1  # the row's WAL position waits for the dead letter's ack
        delivery = _Delivery(batch, self._failed, record["table"])
        try:
            self._producer_for().produce(self.topic, value, key, headers=headers,
                                         on_delivery=delivery.delivered)
        except KafkaException as exc:
            raise _refused(record["table"], self.topic, exc.args[0].str()) from None
        except BufferError:
            self.flush()
            self._producer_for().produce(self.topic, value, key, headers=headers,
                                         on_delivery=delivery.delivered)
        metrics.DEAD_LETTERS.labels(record["table"] or "?").inc()
        log.warning("dead letter to %s (table %s, key %s, LSN %s): %s", self.topic,
                    record["table"], record["key"], record.get("lsn_text"), error)

    def _producer_for(self) -> Producer:
        if self._producer is None:
            limit = max(MAX_BYTES + 1024 * 1024,
                        int(self.extra.get("message.max.bytes", 0) or 0))
            self._producer = Producer(client_config(self.bootstrap, **{
                **BASE_CONFIG, **self.extra, "message.max.bytes": limit, "batch.size": MAX_BYTES,
            }))
        return self._producer

    def poll(self, timeout: float = 0) -> None:
        if self._producer is not None:
            self._serve(self._producer.poll, timeout)
        self.check()

    def close(self) -> None:
        """Release the dead letters' producer, if one was made (after :meth:`flush`)."""
        if self._producer is not None:
            self._producer.close()
            self._producer = None

    def flush(self, timeout: float = 60) -> int:
        """Wait for the dead letters' acknowledgements; the number still unacknowledged."""
        remaining = self._serve(self._producer.flush, timeout) if self._producer else 0
        self.check()
        return remaining

    def _serve(self, call, timeout: float) -> int:
        try:
            return call(timeout)
        except KafkaException as exc:  # a fatal error: one line, the capture resumes later
            raise producer_failed(f"the producer of {self.topic}", exc.args[0].str()) from None

    def check(self) -> None:
        if self._failed:
            table, reason = self._failed[0]
            raise _refused(table, self.topic, reason)


class _Delivery:
    __slots__ = ("batch", "failed", "table")

    def __init__(self, batch, failed: list, table: str | None):
        self.batch, self.failed, self.table = batch, failed, table

    def delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append((self.table, err.str()))
        elif self.batch is not None:
            self.batch.pending -= 1


def _refused(table: str | None, topic: str, reason: str) -> BottlerError:
    return BottlerError(
        f"cannot write the dead letter of a row of {table or 'a table'} to {topic}: {reason}; "
        "the capture stops without confirming past the row, nothing is lost",
        f"check the broker and the topic {topic} (its max.message.bytes is {MAX_BYTES}); the "
        "restart tries the row again",
    )


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()
