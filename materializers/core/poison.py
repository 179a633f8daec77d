"""The poison policy, once for every loop: a message that cannot be applied (undecodable,
refused by the sink, failing a translator) either stops the loop or is set aside in the
prefix's dead-letter topic with why in its headers (dead_letters.py), and the loop goes on.

The consumer loop and the warehouse job send dead letters through a producer of their own,
made at the first one; a translator hands in its transactional producer, so that a dead letter
is part of its batch's transaction and written exactly once, like its events.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Literal

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from common.errors import BottlerError
from materializers.core import dead_letters, metrics
from materializers.core.changes import Change
from materializers.core.sink import Offsets, RejectedChange, Sink

log = logging.getLogger(__name__)

PoisonPolicy = Literal["dead-letter", "stop"]
POLICIES: tuple[PoisonPolicy, ...] = ("dead-letter", "stop")


def checked(policy: str) -> PoisonPolicy:
    """``policy`` if it is one; raised before anything starts (a command checks its
    --on-poison with this before Spark or a consumer takes its seconds to start)."""
    if policy not in POLICIES:
        raise BottlerError(f"on-poison must be dead-letter or stop, not {policy!r}",
                           "pass --on-poison dead-letter (the default) or --on-poison stop")
    return policy  # type: ignore[return-value]


class PoisonMessage(BottlerError):
    """A message that cannot be applied (undecodable, or rejected by the sink) under
    ``on_poison="stop"``."""

    def __init__(self, topic: str, partition: int, offset: int, reason: str):
        super().__init__(
            f"cannot apply {topic}[{partition}]@{offset}: {reason}",
            "fix the target or the message, or run with on_poison=dead-letter to set it aside",
        )
        self.topic, self.partition, self.offset, self.reason = topic, partition, offset, reason


Content = tuple[bytes | None, bytes | None]


class DeadLetters:
    """The poison policy of one loop named ``name``, sending to ``topic`` (the prefix's
    dead-letter topic).

    ``producer``: None for a producer of our own, made at the first dead letter (on
    ``bootstrap``) and checked by :meth:`flush`; or a function giving the producer to send
    through (a translator's transactional one, whose commit is the check: its owner does not
    call :meth:`flush`). Thread-safe: the consumer loop sets aside from two threads.
    """

    def __init__(self, policy: str, *, name: str, topic: str, bootstrap: str,
                 producer: Callable[[], Producer] | None = None):
        self.policy = checked(policy)
        self.name, self.topic, self.bootstrap = name, topic, bootstrap
        self._given = producer
        self._own: Producer | None = None
        self._lock = threading.Lock()
        self._failure: str | None = None  # the first delivery failure since the last flush

    def message(self, msg: Message, reason: str, error: str) -> None:
        """Stop on ``msg`` (raise :class:`PoisonMessage`) or set it aside."""
        self.at(msg.topic(), msg.partition(), msg.offset(), reason, error,
                (msg.key(), msg.value()))

    def at(self, topic: str, partition: int, offset: int, reason: str, error: str,
           content: Content | Callable[[], Content]) -> None:
        """The same for a message known by its place: ``content`` is its (key, value), or a
        function reading them (called only to set it aside: the job reads them back then)."""
        if self.policy == "stop":
            raise PoisonMessage(topic, partition, offset, reason)
        key, value = content() if callable(content) else content
        log.warning("%s: %s[%d]@%d to %s: %s", self.name, topic, partition, offset, self.topic,
                    reason)
        headers = dead_letters.headers(topic, partition, offset, reason, error, self.name)
        producer = self._producer()
        while True:
            try:
                producer.produce(self.topic, value, key, headers=headers,
                                 on_delivery=None if self._given else self._delivered)
                break
            except BufferError:
                producer.poll(0.05)  # the local queue is full: let deliveries drain
            except KafkaException as exc:  # a fatal error of the producer
                raise self._failed(exc.args[0].str()) from None
        metrics.DEAD_LETTERS.labels(self.name, topic).inc()

    def flush(self) -> None:
        """Wait until our dead letters are acknowledged (before the batch that set them aside
        counts as done); BottlerError if one was not."""
        if self._own is None:
            return
        try:
            if self._own.flush(30) > 0:
                self._failure = self._failure or "timed out"
        except KafkaException as exc:  # a fatal error of the producer
            self._failure = self._failure or exc.args[0].str()
        if self._failure is not None:
            failure, self._failure = self._failure, None
            raise self._failed(failure)

    def _failed(self, reason: str) -> BottlerError:
        return BottlerError(f"cannot write to {self.topic}: {reason}",
                            "check the broker; the batch is replayed on restart")

    def close(self) -> None:
        with self._lock:
            own, self._own = self._own, None
        if own is not None:
            own.flush(10)

    def _producer(self) -> Producer:
        if self._given is not None:
            return self._given()
        with self._lock:
            if self._own is None:
                self._own = dead_letters.producer(self.bootstrap, self.topic)
            return self._own

    def _delivered(self, err: KafkaError | None, _msg: Message) -> None:
        if err is not None and self._failure is None:
            self._failure = err.str()


def apply(sink: Sink, changes: Sequence[Change], offsets: Offsets, dead_letters: DeadLetters,
          content: Callable[[Change], Content]) -> list[Change]:
    """Write and flush a batch into ``sink``. A change it refuses (:class:`RejectedChange`, at
    write or at flush) is stopped on or set aside (``content(change)``: its message's key and
    value) and the batch is written again without it; the dead letters are acknowledged before
    the flush, so that a batch never counts as done with one lost. Returns what was applied."""
    remaining = list(changes)
    while True:
        try:
            sink.write(remaining, offsets)
            dead_letters.flush()
            sink.flush()
            return remaining
        except RejectedChange as exc:
            index = next((i for i, c in enumerate(remaining) if c is exc.change), None)
            if index is None:
                raise  # not a change of this batch: a bug of the sink
            refused = exc.change
            dead_letters.at(refused.topic, refused.partition, refused.offset, exc.reason,
                            "RejectedChange", lambda c=refused: content(c))
            del remaining[index]
