"""The Kafka side of capture: an idempotent producer whose acknowledgements drive the WAL position
confirmed to PostgreSQL (see acks.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from bottler.errors import BottlerError
from capture.acks import AckTracker, Batch

log = logging.getLogger(__name__)

BASE_CONFIG = {
    "enable.idempotence": True,  # no duplicates or reordering from the producer's own retries
    "acks": "all",
    "partitioner": "murmur2_random",  # Java's partitioner: every event of a key in one partition
    "linger.ms": 5,
    "compression.type": "lz4",
    "queue.buffering.max.messages": 500_000,
    "queue.buffering.max.kbytes": 512 * 1024,
}


class DataError(Exception):
    """A row that cannot be published as it is (too large, unconvertible); --on-error decides."""


class Publisher:
    def __init__(
        self,
        bootstrap: str,
        extra_config: dict[str, str] | None = None,
        tracker: AckTracker | None = None,
        on_data_error: Callable[[DataError], None] | None = None,
    ):
        self.bootstrap = bootstrap
        self.tracker = tracker or AckTracker()
        self._on_data_error = on_data_error or _raise
        self._fatal: BottlerError | None = None
        self._producer = Producer({
            **BASE_CONFIG, "bootstrap.servers": bootstrap, **(extra_config or {}),
            "error_cb": self._client_error,
        })

    def send(self, topic: str, key: bytes | None, value: bytes | None, batch: Batch) -> None:
        tracker = self.tracker

        def delivered(err: KafkaError | None, _msg) -> None:
            if err is None:
                tracker.acked(batch)
                return
            if err.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                if not self._skip(_too_large(topic, len(value or b"") + len(key or b""))):
                    return  # never acked: nothing past it is confirmed
            else:
                # Any other failure after the producer's own retries: stop, and let the restart
                # resend from the last confirmed WAL position (nothing is confirmed past this).
                self._fatal = BottlerError(
                    f"Kafka did not accept a message for {topic}: {err.str()}",
                    "check the broker; capture resumes from the last confirmed position",
                )
                return
            tracker.acked(batch)

        tracker.sent(batch)
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=delivered)
                break
            except BufferError:
                self._producer.poll(0.05)  # local queue full: let deliveries drain
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE and self._skip(
                    _too_large(topic, len(value or b"") + len(key or b""))
                ):
                    tracker.acked(batch)
                    return
                self.raise_if_failed()
                raise BottlerError(f"cannot produce to {topic}: {exc.args[0].str()}") from None
        self.raise_if_failed()

    def poll(self, timeout: float = 0) -> None:
        self._producer.poll(timeout)
        self.raise_if_failed()

    def flush(self, timeout: float = 60) -> None:
        """Wait until everything sent is acknowledged; raise if it could not be."""
        remaining = self._producer.flush(timeout)
        self.raise_if_failed()
        if remaining:
            raise BottlerError(
                f"{remaining} messages were not acknowledged by {self.bootstrap} "
                f"within {timeout:.0f}s",
                "check that the broker is up; capture resumes from the last confirmed position",
            )

    def raise_if_failed(self) -> None:
        if self._fatal:
            raise self._fatal

    def data_error(self, error: DataError) -> None:
        """A row that cannot be published: skip it (--on-error=log) or raise."""
        if not self._skip(error):
            self.raise_if_failed()

    def _skip(self, error: DataError) -> bool:
        """Apply the --on-error policy: True if the message is skipped, False if fatal."""
        try:
            self._on_data_error(error)
            return True
        except BottlerError as exc:
            self._fatal = exc
            return False

    def _client_error(self, err: KafkaError) -> None:
        if err.fatal():
            self._fatal = BottlerError(f"Kafka producer failed: {err.str()}")
        elif err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            log.warning("Kafka broker %s: %s (retrying)", self.bootstrap, err.str())


def _too_large(topic: str, size: int) -> DataError:
    return DataError(
        f"a message of {size} bytes for {topic} exceeds the broker's or producer's size limit "
        "(message.max.bytes); raise it with -C message.max.bytes=N and the topic's "
        "max.message.bytes with -T max.message.bytes=N"
    )


def _raise(error: DataError) -> None:
    raise BottlerError(str(error))
