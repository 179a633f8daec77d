"""Running a translator: consume table topics, translate, produce business events, exactly once.

Per batch, in one Kafka transaction: the batch's events, its dead letters, the changes of the
keyed state (state.py) and the consumed offsets (``send_offsets_to_transaction``); then
``commit_transaction``. A read_committed consumer of the outputs therefore sees each input
message's events exactly once: a crash before the commit leaves an open transaction that the
restarted runner's ``init_transactions`` aborts (same ``transactional.id``), and the restart
resumes from the offsets committed with the last committed batch, with the state as of then.
A broker error that aborts a transaction rewinds to the batch's start and tries again.

One process per group id by default: its ``transactional.id`` is the group id, which fences
off any other (zombie) process of the same translator. With ``join_group`` the process is one
instance of several in the consumer group, sharing the input partitions (eager rebalances);
its ``transactional.id`` is ``<group id>.<instance id>`` (a restart under the same instance id
fences and aborts what its predecessor left open). A rebalance happens between two transactions
(the callbacks run inside ``consume``), so nothing is half done when partitions move; a consume
during which the assignment changed is void. Each assigned partition resumes from the offsets
committed with the last transaction that consumed it, with the keyed state of its keys read
again from the changelog (another instance may have moved them since).

From the core: the consumer loop's skeleton (materializers/core/consumer.py: assignment, the
refetch after a rebalance, the watermark reads, a broker restart being a pause, and the replay of
an input that lost its log end) and the poison policy (poison.py; its dead letters go through the
batch's transaction). Inputs are table topics only: a translator sees row changes, never
truncate events, so it has no barriers to follow.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from common.errors import BottlerError
from common.kafka import Connection, await_topics, client_config, denied, is_denied
from common.registry_client import Registry, registry_client
from materializers.core import clients, dead_letters, watermarks
from materializers.core import metrics as core_metrics
from materializers.core.changes import TopicPartition
from materializers.core.consumer import ConsumerLoop
from materializers.core.decode import Decoder
from materializers.core.ownership import discover_or_none
from materializers.core.poison import DeadLetters, PoisonPolicy
from materializers.translators import metrics
from materializers.translators.api import Translator
from materializers.translators.encoding import EventEncoder
from materializers.translators.state import KeyedState
from materializers.translators.translate import MessageTranslator
from schemas.topics import CONTROL, DEAD_LETTER, with_prefix

log = logging.getLogger(__name__)

TOPIC_WAIT_LOG_INTERVAL = 30.0  # seconds between "still waiting for the input topics" lines


def default_group_id(name: str, prefix: str = "") -> str:
    return with_prefix(prefix, f"bottler-translate-{name}")


class TranslatorRunner(ConsumerLoop):
    """Runs one :class:`Translator`.

    Input topics are the translator's inputs under ``topic_prefix`` (the capture's
    ``--topic-prefix``); output topics are its outputs under ``output_prefix`` (by default the
    same prefix). The keyed state's changelog is ``[prefix.]_bottler.state.<group id>``;
    failures go to ``[prefix.]_bottler.dead-letter`` (``on_poison="dead-letter"``) or stop the
    runner (``"stop"``): an input that cannot be decoded, a translate function that raises, an
    event its topic's schema cannot hold.
    """

    def __init__(
        self,
        translator: Translator,
        *,
        bootstrap: Connection,
        registry: Registry,
        topic_prefix: str = "",
        output_prefix: str | None = None,
        group_id: str | None = None,
        on_poison: PoisonPolicy = "dead-letter",
        batch_size: int = 500,
        # a batch is a Kafka transaction, some ten broker requests and markers: one a second
        # at most under a trickle (at 0.2 s the demo's 5 orders/s cost Kafka 0.03 core)
        batch_timeout: float = 1.0,
        watermark_interval: float = 1.0,
        transaction_timeout_ms: int = 60_000,
        consumer_config: dict[str, Any] | None = None,
        producer_config: dict[str, Any] | None = None,
        join_group: bool = False,
        instance_id: str | None = None,
    ):
        if join_group and not instance_id:
            # an anonymous instance's open transaction blocks readers until the broker times
            # it out (transaction.timeout.ms): a restart under the same transactional id ends
            # it at once
            raise BottlerError("a translator sharing its group (--join-group) needs an "
                               "--instance-id", "give each instance a stable name, e.g. "
                               "--instance-id orders-1, and restart it under that name")
        group_id = group_id or default_group_id(translator.name, topic_prefix)
        super().__init__(group_id, bootstrap=bootstrap, group_id=group_id,
                         join_group=join_group, watermark_interval=watermark_interval,
                         truncate_topic=None)
        self.instance_id = instance_id
        self._held: set[TopicPartition] = set()  # as of the last assignment, state current
        self.translator = translator
        self.registry = registry_client(registry)
        # In the batch's transaction: a dead letter, too, is written exactly once.
        self.dead_letters = DeadLetters(on_poison, name=self.group_id, bootstrap=bootstrap,
                                        topic=with_prefix(topic_prefix, DEAD_LETTER),
                                        producer=lambda: self._producer)
        self.on_poison = self.dead_letters.policy
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        self.watermark_interval = watermark_interval
        self.inputs = [with_prefix(topic_prefix, t) for t in translator.inputs]
        out = topic_prefix if output_prefix is None else output_prefix
        self.outputs = {o.topic: with_prefix(out, o.topic) for o in translator.outputs}
        self.changelog = with_prefix(topic_prefix, f"{CONTROL}state.{self.group_id}")
        self.dead_letter_topic = self.dead_letters.topic
        self.state = KeyedState(self.changelog)
        self.decoder = Decoder(self.registry)
        self._messages: MessageTranslator | None = None  # made with the encoder, at start
        self._consumer_config = clients.consumer_config(
            bootstrap, self.group_id, join_group=join_group, instance_id=instance_id,
            client_id=instance_id, overrides=consumer_config, ours={
                "isolation.level": "read_committed", "error_cb": self._client_error})
        self._producer_config = clients.producer_config(bootstrap, **{
            "transactional.id": f"{self.group_id}.{instance_id}" if join_group else self.group_id,
            "acks": "all",
            "partitioner": "murmur2_random",  # Java's: the events of a key in one partition
            "linger.ms": 5,
            "transaction.timeout.ms": transaction_timeout_ms,
            "error_cb": self._client_error,
            **(producer_config or {}),
        })
        self._producer: Producer | None = None
        self._broker_was_away = False  # a connection was lost, or a watermark read failed

    # -- start and stop -----------------------------------------------------------------

    def _open(self, stop: threading.Event, deadline: float | None = None) -> bool:
        admin = AdminClient(client_config(self.bootstrap))
        partitions = self._wait_for_inputs(admin, stop, deadline)
        if partitions is None:
            return False
        self._create_topics(admin)
        self._messages = MessageTranslator(
            self.translator, self.decoder, self.state, self.dead_letters, self.changelog,
            EventEncoder(self.registry, list(self.translator.outputs), self.outputs),
            producer=lambda: self._producer, name=self.group_id)
        # First the producer: initialising it fences any predecessor and aborts its open
        # transaction, so what the changelog and the committed offsets hold is final.
        self._new_producer()
        self._consumer = Consumer(self._consumer_config)
        self._marks = watermarks.Reader(self.bootstrap)
        self.tracker.revoke(self.tracker.partitions)
        self._watermarks.reset()
        if self.join_group:  # partitions and state come with each assignment
            self._held = set()
            self._subscribe_to(self.inputs)
            log.info("%s: instance %s translating %s into %s, sharing the partitions in its "
                     "group", self.group_id, self.instance_id, ", ".join(self.inputs),
                     ", ".join(self.outputs.values()))
            return True
        if self.translator.keep_previous:
            self.state.restore(self.bootstrap)
            metrics.STATE_ROWS.labels(self.group_id).set(len(self.state))
        # Partitions are assigned by hand: no group rebalance to wait for after a kill.
        start = self._assign_committed(self._consumer,
                                       [KafkaTopicPartition(t, p) for t, p in partitions])
        self.tracker.assign(start)
        log.info("%s: translating %s into %s from %s", self.group_id, ", ".join(self.inputs),
                 ", ".join(self.outputs.values()),
                 ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(start.items())))
        return True

    def _assigned_by_group(self, consumer: Consumer,
                           partitions: list[KafkaTopicPartition]) -> None:
        """A rebalance gave this instance ``partitions`` (all it holds: eager). The instance
        that held them before committed its last transaction before giving them up (or, killed,
        had it aborted by its restart): the committed offsets and the changelog are final."""
        keys = {(tp.topic, tp.partition) for tp in partitions}
        # The rows of partitions held before are ours, current; those of the partitions gained
        # are read again: every live instance finished its transaction before this assignment,
        # so only a killed one's open transaction can hold the changelog's stable end back, and
        # it started after that instance's last committed rows.
        if self.translator.keep_previous and (gained := keys - self._held):
            self.state.restore(self.bootstrap, gained, merge=True)
            metrics.STATE_ROWS.labels(self.group_id).set(len(self.state))
        self._held = keys
        start = self._assign_committed(consumer, partitions)
        self.tracker.revoke(self.tracker.partitions)
        self.tracker.assign(start)
        self._watermarks.reset()
        log.info("%s: holds %s", self.instance_id, ", ".join(
            f"{t}[{p}]@{o}" for (t, p), o in sorted(start.items())) or "no partition")

    def _assign_committed(self, consumer: Consumer, partitions: list[KafkaTopicPartition]
                          ) -> dict[TopicPartition, int]:
        """Assign ``partitions`` at the offsets committed with the last transaction that
        consumed them (none yet: the beginning); where each starts."""
        committed = consumer.committed(partitions, timeout=30) if partitions else []
        for tp in committed:
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
        consumer.assign(committed)
        start = {(tp.topic, tp.partition): max(tp.offset, 0) for tp in committed}
        self._position = dict(start)
        self._assigned = set(start)
        return start

    # Partitions revoked go to another instance between two transactions (callbacks run inside
    # ``consume``): everything translated of them is committed already.

    def _on_group_lost(self, consumer: Consumer,
                       partitions: list[KafkaTopicPartition]) -> None:
        """Partitions taken away without a revoke (this instance was out of the group for too
        long): another instance may have translated them since, so their state is read again
        should they come back."""
        super()._on_group_lost(consumer, partitions)
        self._held -= {(tp.topic, tp.partition) for tp in partitions}

    def _wait_for_inputs(self, admin: AdminClient, stop: threading.Event,
                         deadline: float | None) -> list[TopicPartition] | None:
        """The input topics' partitions, once they all exist (the capture creates them);
        None if stopped first. Asks for every topic: asking for one by name may create it."""
        next_log = time.monotonic()
        while not stop.is_set():
            found = discover_or_none(admin, set(self.inputs).__contains__, name=self.group_id)
            if found is None:
                stop.wait(1.0)
                continue
            missing = [t for t in self.inputs if t not in {tp[0] for tp in found}]
            if not missing:
                return found
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"input topics {', '.join(missing)} do not exist")
            if time.monotonic() >= next_log:
                log.info("%s: waiting for the input topics %s (is the capture running?)",
                         self.group_id, ", ".join(missing))
                next_log = time.monotonic() + TOPIC_WAIT_LOG_INTERVAL
            stop.wait(1.0)
        return None

    def _create_topics(self, admin: AdminClient) -> None:
        kept = {"cleanup.policy": "delete", "retention.ms": "-1"}
        wanted = [NewTopic(self.outputs[o.topic], num_partitions=o.partitions, config=kept)
                  for o in self.translator.outputs]
        wanted.append(NewTopic(self.dead_letter_topic, num_partitions=1,
                               config=dead_letters.CONFIG))
        if self.translator.keep_previous:
            wanted.append(NewTopic(self.changelog, num_partitions=1,
                                   config={"cleanup.policy": "compact"}))
        existing = admin.list_topics(timeout=10).topics
        new = [t for t in wanted if t.topic not in existing]
        for topic, future in (admin.create_topics(new).items() if new else []):
            try:
                future.result(timeout=30)
            except KafkaException as exc:
                if is_denied(exc.args[0]):
                    raise denied(self.bootstrap, "CREATE", f"topic {topic}",
                                 exc.args[0]) from None
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise BottlerError(f"cannot create topic {topic}: {exc.args[0].str()}",
                                       "check the broker") from None
        await_topics(admin, [t.topic for t in new])

    def _close(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
            self._producer = None
        if self._consumer is not None:
            try:
                self._consumer.close()
            finally:
                self._consumer = None

    # -- the loop -----------------------------------------------------------------------

    def step(self) -> None:
        """One batch: consume, then translate and commit it in one transaction."""
        assert self._consumer is not None, "run() opens the consumer"
        messages = []
        for msg in self._consume(self.batch_timeout)[0]:
            error = msg.error()
            if error is None:
                messages.append(msg)
            else:
                self._kafka_error(error, msg.topic())
        if messages:
            self._transact(messages)
        self._refresh_watermarks(force=len(messages) < self.batch_size)
        self.tracker.check()

    def _new_producer(self) -> None:
        if self._producer is not None:
            self._producer.flush(10)
        self._producer = Producer(self._producer_config)
        self._producer.init_transactions(60)
        self._broker_was_away = False

    def _client_error(self, error: KafkaError) -> None:
        """The clients' error callback: a lost connection may be a broker restart."""
        if error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT):
            self._broker_was_away = True

    def _transact(self, messages: list[Message]) -> None:
        if self._broker_was_away:
            # After a lost connection, a new transactional producer, between two
            # transactions, fences the old one: one init_transactions per reconnection. (The
            # stand-in broker before Kafka forgot transactional sessions on a restart; Kafka
            # keeps them, so this is insurance now, kept until measured without it.)
            self._new_producer()
        producer = self._producer
        assert producer is not None
        self._messages.events = {}
        producer.begin_transaction()
        try:
            for msg in messages:
                self._messages.translate(msg)
            offsets: dict[TopicPartition, int] = {}
            for msg in messages:
                offsets[(msg.topic(), msg.partition())] = msg.offset() + 1
            producer.send_offsets_to_transaction(
                [KafkaTopicPartition(t, p, o) for (t, p), o in offsets.items()],
                self._consumer.consumer_group_metadata(), 60)
            self._commit(producer)
        except KafkaException as exc:
            error = exc.args[0]
            self.state.discard()
            if is_denied(error):
                self._abort_quietly(producer)
                raise self._denied(error, None) from None
            if not error.txn_requires_abort():
                raise BottlerError(f"{self.group_id}: Kafka transaction failed: {error.str()}",
                                   "the translator resumes from its last committed batch "
                                   "when restarted") from None
            producer.abort_transaction(60)
            self._rewind(messages)
            metrics.ABORTS.labels(self.group_id).inc()
            log.warning("%s: transaction aborted (%s); retrying the batch", self.group_id,
                        error.str())
            return
        except BaseException:
            self.state.discard()
            self._abort_quietly(producer)
            raise
        self.state.commit()
        for tp, offset in offsets.items():
            self._position[tp] = offset
            self.tracker.advance(tp, offset)
        core_metrics.BATCHES.labels(self.group_id).inc()
        for topic, n in self._messages.events.items():
            metrics.EVENTS.labels(self.group_id, topic).inc(n)
        if self.translator.keep_previous:
            metrics.STATE_ROWS.labels(self.group_id).set(len(self.state))

    def _denied_otherwise(self, error: KafkaError) -> BottlerError:
        """A refusal of what the translator writes."""
        if error.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED:
            return denied(self.bootstrap, "WRITE",
                          f"transactional id {self._producer_config['transactional.id']}", error)
        written = ", ".join([*self.outputs.values(), self.changelog, self.dead_letter_topic])
        return denied(self.bootstrap, "WRITE", f"topics {written}", error)

    def _commit(self, producer: Producer) -> None:
        for attempt in range(5):
            try:
                producer.commit_transaction(60)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or attempt == 4:
                    raise
                time.sleep(0.2 * (attempt + 1))

    def _abort_quietly(self, producer: Producer) -> None:
        try:
            producer.abort_transaction(30)
        except KafkaException as exc:  # the restart's init_transactions aborts it anyway
            log.warning("%s: aborting the transaction failed: %s", self.group_id, exc)

    def _rewind(self, messages: list[Message]) -> None:
        first: dict[TopicPartition, int] = {}
        for msg in messages:
            first.setdefault((msg.topic(), msg.partition()), msg.offset())
        for (topic, partition), offset in first.items():
            self._consumer.seek(KafkaTopicPartition(topic, partition, offset))

    def _watermarks_unknown(self) -> None:  # a broker restart: a new producer after it
        self._broker_was_away = True
