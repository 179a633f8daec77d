"""The capture's transactional producer: a streamed (large) transaction is published inside one
Kafka transaction, so a ``read_committed`` reader sees the whole of it or nothing.

Its ``transactional.id`` is the capture's (its topic prefix and slot): the producer is made, and
registered with ``init_transactions``, when the stream starts, so a restarted capture fences its
predecessor at once and the broker aborts whatever Kafka transaction that one left open (a
``kill -9`` in the middle of a replay); the server then streams the transaction again, whole.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException, Producer

from capture.publish.producer_config import BASE_CONFIG
from common.errors import BottlerError
from common.kafka import client_config, denied, is_denied

log = logging.getLogger(__name__)

# The broker aborts a Kafka transaction open longer than this (its own ceiling,
# transaction.max.timeout.ms, is 15 minutes by default): room for the replay of a transaction
# of millions of rows. -C transaction.timeout.ms overrides it.
TRANSACTION_TIMEOUT_MS = 900_000
TIMEOUT = 60.0  # seconds for init, commit and abort
# Nothing sent in a Kafka transaction is seen before its commit, which flushes at once: lingering
# longer than the rows' producer costs no latency, and the fuller batches cost the broker less
# (docs/benchmarks.md). -C linger.ms overrides it.
LINGER_MS = 100


def transactional_id(topic_prefix: str, slot: str) -> str:
    """One per capture: the topics it writes (its prefix) and the slot it reads."""
    return f"{topic_prefix}.bottler-capture-{slot}" if topic_prefix else f"bottler-capture-{slot}"


class KafkaTransactions:
    """The producer the capture's Kafka transactions are written with: ``bootstrap`` and
    ``extra_config`` as the Publisher takes them (producer_config.transactional_config)."""

    def __init__(self, bootstrap: str, extra_config: dict[str, str], tid: str):
        self.connection, self.id = {**extra_config, "bootstrap.servers": bootstrap}, tid
        self.producer = Producer(client_config(bootstrap, **{
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS, **BASE_CONFIG,
            "linger.ms": LINGER_MS, **extra_config, "transactional.id": tid}))
        try:
            # connected first: librdkafka asks for the transaction coordinator at once, and
            # when no connection is up yet it may wait for its next 500 ms timer (a third of
            # cold starts measured 0.51 s, against 0.06 s; 0.006 s once connected), on the
            # capture's path to its slot
            self.producer.list_topics(timeout=TIMEOUT)
            self.producer.init_transactions(TIMEOUT)
        except KafkaException as exc:
            raise self.failed("cannot start", exc) from None

    def begin(self) -> None:
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            raise self.failed("cannot begin", exc) from None

    def commit(self) -> None:
        """Everything sent since ``begin`` becomes visible at once (commit_transaction flushes
        it first)."""
        try:
            self.producer.commit_transaction(TRANSACTION_TIMEOUT_MS / 1000)
        except KafkaException as exc:
            raise self.failed("cannot commit", exc) from None

    def abort(self) -> None:
        """Best effort: a restart's init_transactions aborts it anyway, or the broker does once
        it times out; aborted now, ``read_committed`` readers go on at once."""
        try:
            self.producer.abort_transaction(TIMEOUT)
        except KafkaException as exc:
            log.warning("aborting the Kafka transaction of %s failed: %s", self.id,
                        exc.args[0].str())

    def failed(self, what: str, exc: KafkaException) -> BottlerError:
        error = exc.args[0]
        if is_denied(error):
            return denied(self.connection, "WRITE", f"transactional id {self.id}", error)
        return BottlerError(
            f"{what} the Kafka transaction of a streamed transaction (transactional id "
            f"{self.id}): {error.str()}",
            "another capture with the same slot and topic prefix may have taken over; else "
            "start the capture again: the server streams the transaction again, and "
            "read_committed readers never saw part of it")
