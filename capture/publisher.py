"""The Kafka side of capture: an idempotent producer whose acknowledgements drive the WAL position
confirmed to PostgreSQL (see acks.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from capture.acks import AckTracker, Batch
from common.errors import BottlerError

log = logging.getLogger(__name__)

BASE_CONFIG = {
    "enable.idempotence": True,  # no duplicates or reordering from the producer's own retries
    "acks": "all",
    "partitioner": "murmur2_random",  # Java's partitioner: every event of a key in one partition
    "linger.ms": 5,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 64 * 1024,  # what may wait unacknowledged: bounds memory
}


class DataError(Exception):
    """A row that cannot be published as it is (too large, unconvertible); --on-error decides."""


class Publisher:
    """Sends messages; with ``track`` each one counts in its batch until Kafka acknowledges it,
    without (the snapshot's copies, which count once flush() returns) only failures report."""

    def __init__(
        self,
        bootstrap: str,
        extra_config: dict[str, str] | None = None,
        on_data_error: Callable[[DataError], None] | None = None,
        track: bool = True,
    ):
        self.bootstrap = bootstrap
        self.tracker = AckTracker()
        self._on_data_error = on_data_error or _raise
        self._fatal: BottlerError | None = None
        untracked = {} if track else {
            "delivery.report.only.error": True, "on_delivery": self._untracked_failure,
        }
        self._producer = Producer({
            **BASE_CONFIG, "bootstrap.servers": bootstrap, **(extra_config or {}),
            **untracked, "error_cb": self._client_error,
        })

    def send(self, topic: str, key: bytes | None, value: bytes | None,
             batch: Batch | None = None, headers: list[tuple[str, bytes]] | None = None) -> None:
        if batch is not None:
            batch.pending += 1
        while True:
            try:
                if batch is None:
                    self._producer.produce(topic, value, key, headers=headers)
                else:
                    self._producer.produce(topic, value, key, on_delivery=batch.delivered,
                                           headers=headers)
                return
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain
            except KafkaException as exc:
                if batch is not None:
                    batch.pending -= 1
                if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                    raise BottlerError(f"cannot produce to {topic}: {exc.args[0].str()}") from None
                self.data_error(_too_large(topic, len(value or b"") + len(key or b"")))
                return

    def poll(self, timeout: float = 0) -> None:
        self._producer.poll(timeout)
        self._handle_failures()

    def flush(self, timeout: float = 60) -> None:
        """Wait until everything sent is acknowledged; raise if it could not be."""
        remaining = self._producer.flush(timeout)
        self._handle_failures()
        if remaining:
            raise BottlerError(
                f"{remaining} messages were not acknowledged by {self.bootstrap} "
                f"within {timeout:.0f}s",
                "check that the broker is up; capture resumes from the last confirmed position",
            )

    def data_error(self, error: DataError) -> None:
        """A row that cannot be published: skip it (--on-error=log) or raise."""
        self._on_data_error(error)

    def _handle_failures(self) -> None:
        failures = self.tracker.failures
        while failures and self._fatal is None:
            batch, err, msg = failures.pop(0)
            if err.code() != KafkaError.MSG_SIZE_TOO_LARGE:
                # Any other failure after the producer's own retries: stop, and let the restart
                # resend from the last confirmed WAL position (nothing is confirmed past this).
                self._fatal = BottlerError(
                    f"Kafka did not accept a message for {msg.topic()}: {err.str()}",
                    "check the broker; capture resumes from the last confirmed position",
                )
                break
            size = len(msg.value() or b"") + len(msg.key() or b"")
            try:
                self.data_error(_too_large(msg.topic(), size))
            except BottlerError as exc:
                self._fatal = exc  # never acked: nothing past it is confirmed
                break
            if batch is not None:
                batch.pending -= 1  # skipped, by policy
        if self._fatal:
            raise self._fatal

    def _untracked_failure(self, err, msg) -> None:
        self.tracker.failures.append((None, err, msg))

    def _client_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = BottlerError(f"Kafka producer failed: {err.str()}")
        elif err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            log.warning("Kafka broker %s: %s (retrying)", self.bootstrap, err.str())


def _too_large(topic: str, size: int) -> DataError:
    return DataError(
        f"a message of {size} bytes for {topic} exceeds the broker's or producer's size limit "
        "(message.max.bytes); raise it with -C message.max.bytes=N and the topic's "
        "max.message.bytes with -T max.message.bytes=N (the capture applies -T settings to its "
        "existing topics when it starts)"
    )


def _raise(error: DataError) -> None:
    raise BottlerError(str(error))
