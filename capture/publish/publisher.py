"""The Kafka side of capture: an idempotent producer whose acknowledgements drive the WAL position
confirmed to PostgreSQL (see acks.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import KafkaError, KafkaException, Producer

from capture.publish.acks import AckTracker, Batch
from capture.publish.dead_letters import ErrorPolicy, OnError
from capture.publish.errors import RESUME, DataError, producer_failed
from capture.publish.producer_config import BASE_CONFIG
from capture.publish.row import Row
from capture.publish.transactional import KafkaTransactions
from common.errors import BottlerError
from common.kafka import client_config
from common.logs import RateLimited

log = logging.getLogger(__name__)
broker_log = RateLimited(log)  # a broker that is down: one line a minute, not one per retry

PRODUCER = "the capture's Kafka producer"


class Publisher:
    """Sends messages; with ``track`` each one counts in its batch until Kafka acknowledges it,
    without (the snapshot's copies, which count once flush() returns) only failures report."""

    def __init__(
        self,
        bootstrap: str,
        extra_config: dict[str, str] | None = None,
        policy: ErrorPolicy | None = None,
        track: bool = True,
    ):
        self.bootstrap = bootstrap
        self.tracker = AckTracker()
        self.policy = policy or ErrorPolicy(OnError("exit"))
        self._fatal: BottlerError | None = None
        untracked = {} if track else {
            "delivery.report.only.error": True, "on_delivery": self._untracked_failure,
        }
        config = {**BASE_CONFIG, **(extra_config or {})}
        self._producer = Producer(client_config(bootstrap, **config, **untracked,
                                                error_cb=self._client_error))
        self._transactions: KafkaTransactions | None = None  # see transactional()
        self._atomic = False  # inside atomically()
        # A message at most this large shares its batch with others, which together stay under
        # the batch size (and so under the topics' limit, see producer_config): only a larger
        # one can be refused for its size, so only for those is the row's text kept until Kafka
        # acknowledges it (for its dead letter).
        self.at_risk_over = max(0, min(int(config.get("batch.size", 1_000_000)),
                                       int(config.get("message.max.bytes", 1_000_000))) - 4096)

    def at_risk(self, key: bytes | None, value: bytes | None) -> bool:
        """Could Kafka refuse this message for its size? (Then pass its ``row`` to send.)"""
        return len(value or b"") + len(key or b"") > self.at_risk_over

    def send(self, topic: str, key: bytes | None, value: bytes | None,
             batch: Batch | None = None, headers: list[tuple[str, bytes]] | None = None,
             row: Row | None = None) -> None:
        # Inside a Kafka transaction its commit acknowledges every message at once (it fails if
        # one failed, and its batch is sealed only after it), and the producer refuses a message
        # too large before sending it: no delivery to count, no callback per message.
        counted = batch is not None and not self._atomic
        if counted:
            batch.pending += 1
        delivered = batch.delivered if counted else None
        if row is not None and not self._atomic:  # rare: kept for a refusal's dead letter
            delivered = _RowDelivery(batch, row, self.tracker.failures).delivered
        while True:
            try:
                if delivered is None:
                    self._producer.produce(topic, value, key, headers=headers)
                else:
                    self._producer.produce(topic, value, key, on_delivery=delivered,
                                           headers=headers)
                return
            except BufferError:
                self._producer.poll(0.05)  # the local queue is full: let deliveries drain
            except KafkaException as exc:
                if counted:
                    batch.pending -= 1
                if exc.args[0].code() == KafkaError._FATAL:
                    self._serve(self._producer.poll, 0)  # the error callback names the cause
                    raise self._fatal or producer_failed(PRODUCER, exc.args[0].str()) from None
                if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                    raise BottlerError(f"cannot produce to {topic}: {exc.args[0].str()}",
                                       RESUME) from None
                self.data_error(_too_large(topic, row, batch, key, value))
                return

    def transactional(self, transactions: KafkaTransactions) -> None:
        """Make ``atomically`` available, through ``transactions``' producer."""
        self._transactions = transactions

    @contextmanager
    def atomically(self) -> Iterator[None]:
        """What is sent inside reaches ``read_committed`` readers whole once the block ends, or
        never: it goes out in one Kafka transaction. A key's order holds across the two
        producers: what was sent before is acknowledged first, and nothing else is sent until
        the block ends (the stream is serial)."""
        transactions = self._transactions
        self.flush()
        transactions.begin()
        ordinary, self._producer = self._producer, transactions.producer
        self._atomic = True
        try:
            yield
            transactions.commit()  # flushes first, and fails if any message failed
        except BaseException:
            transactions.abort()
            raise
        finally:
            self._producer = ordinary
            self._atomic = False

    def close(self) -> None:
        """Release the producers, everything sent acknowledged (after :meth:`flush`, as a
        stopped stream does): their connections and threads end now. Left to the collector,
        they would end only when it finds them (a producer's callbacks hold the publisher)."""
        for producer in (self._producer, self._transactions and self._transactions.producer):
            if producer is not None:
                producer.close()
        self.policy.close()

    def poll(self, timeout: float = 0) -> None:
        self._serve(self._producer.poll, timeout)
        self._handle_failures()
        self.policy.poll(0)

    def flush(self, timeout: float = 60) -> None:
        """Wait until everything sent is acknowledged (dead letters included); raise if it
        could not be."""
        remaining = self._serve(self._producer.flush, timeout)
        self._handle_failures()  # may send dead letters
        remaining += self.policy.flush(timeout)
        if remaining:
            raise BottlerError(
                f"{remaining} messages were not acknowledged by {self.bootstrap} "
                f"within {timeout:.0f}s",
                "check that the broker is up; capture resumes from the last confirmed position",
            )

    def _serve(self, call, timeout: float) -> int:
        """``poll`` or ``flush``, which run the callbacks: a fatal error raised there (or
        reported by the error callback) ends the capture in one line, not a traceback."""
        try:
            served = call(timeout)
        except KafkaException as exc:
            raise self._fatal or producer_failed(PRODUCER, exc.args[0].str()) from None
        if self._fatal:
            raise self._fatal
        return served

    def data_error(self, error: DataError) -> None:
        """A row that cannot be published: --on-error decides (raises under exit)."""
        self.policy(error)

    def _handle_failures(self) -> None:
        failures = self.tracker.failures
        while failures and self._fatal is None:
            batch, err, msg = failures.pop(0)
            row = None
            if isinstance(batch, _RowDelivery):
                batch, row = batch.batch, batch.row
            if err.code() != KafkaError.MSG_SIZE_TOO_LARGE:
                # Any other failure after the producer's own retries: stop, and let the restart
                # resend from the last confirmed WAL position (nothing is confirmed past this).
                self._fatal = BottlerError(
                    f"Kafka did not accept a message for {msg.topic()}: {err.str()}",
                    "check the broker; capture resumes from the last confirmed position",
                )
                break
            error = _too_large(msg.topic(), row, batch, msg.key(), msg.value())
            try:
                self.data_error(error)  # a dead letter counts in the batch before it is left
            except BottlerError as exc:
                self._fatal = exc  # never acked: nothing past it is confirmed
                break
            if batch is not None:
                batch.pending -= 1  # replaced by its dead letter, or skipped, by policy
        if self._fatal:
            raise self._fatal

    def _untracked_failure(self, err, msg) -> None:
        self.tracker.failures.append((None, err, msg))

    def _client_error(self, err: KafkaError) -> None:
        if err.fatal() and self._fatal is None:
            self._fatal = producer_failed(PRODUCER, err.str())
        elif err.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            broker_log.warning("Kafka broker %s: %s (retrying)", self.bootstrap, err.str())


class _RowDelivery:
    """The delivery callback of a message whose row is kept for its dead letter."""

    __slots__ = ("batch", "failures", "row")

    def __init__(self, batch: Batch | None, row: Row, failures: list):
        self.batch, self.row, self.failures = batch, row, failures

    def delivered(self, err, msg) -> None:
        if err is not None:
            self.failures.append((self, err, msg))
        elif self.batch is not None:
            self.batch.pending -= 1


def _too_large(topic: str, row: Row | None, batch: Batch | None, key: bytes | None,
               value: bytes | None) -> DataError:
    size = len(value or b"") + len(key or b"")
    return DataError(
        f"a message of {size} bytes for {topic} exceeds the broker's or producer's size limit "
        "(message.max.bytes); raise it with -C message.max.bytes=N and the topic's "
        "max.message.bytes with -T max.message.bytes=N (the capture applies -T settings to its "
        "existing topics when it starts)", row, batch, (key, value))
