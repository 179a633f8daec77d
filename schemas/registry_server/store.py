"""The registry's state, kept in a compacted Kafka topic so ids and versions survive restarts.

Records use Confluent Schema Registry's own layout for its `_schemas` topic:

    key   {"keytype":"SCHEMA","subject":s,"version":v,"magic":1}
    value {"subject":s,"version":v,"id":n,"schema":text,"deleted":bool}   (null: hard delete)
    key   {"keytype":"CONFIG","subject":s or null,"magic":0}
    value {"compatibilityLevel":level}                                     (null: unset)

The topic is the source of truth: every write is acknowledged by the broker before it is applied
to memory, and a start replays the topic from offset 0 to the high watermark. One registry
process writes the topic; it does not follow writes made by others after its start.
"""

import json
import logging
import time
from dataclasses import dataclass, field
from functools import cached_property

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from common.kafka import (
    Connection,
    await_topics,
    client_config,
    denied,
    is_denied,
    passing,
    reader_config,
    servers,
)

log = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The Kafka topic behind the registry cannot be read or written."""


class RecordTooLarge(StoreError):
    """A record larger than the topic (or the producer) accepts: nothing was written."""


def canonical(schema_text: str) -> str:
    """The form two schema texts are compared in: same JSON, same string."""
    return json.dumps(json.loads(schema_text), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Version:
    subject: str
    version: int
    id: int
    schema: str
    deleted: bool = False

    @cached_property
    def canonical(self) -> str:
        return canonical(self.schema)


@dataclass
class _State:
    """What the topic says, folded record by record."""

    versions: dict[tuple[str, int], Version] = field(default_factory=dict)
    configs: dict[str | None, str] = field(default_factory=dict)
    max_id: int = 0

    def apply(self, key: dict, value: dict | None) -> None:
        kind = key["keytype"]
        if kind == "SCHEMA":
            ident = (key["subject"], key["version"])
            if value is None:
                self.versions.pop(ident, None)
                return
            # New ids continue from the highest ever read, so an id never changes meaning.
            self.max_id = max(self.max_id, value["id"])
            if value.get("schemaType", "AVRO") == "AVRO":
                self.versions[ident] = Version(
                    value["subject"], value["version"], value["id"], value["schema"],
                    bool(value.get("deleted", False)),
                )
        elif kind == "CONFIG":
            if value is None:
                self.configs.pop(key["subject"], None)
            else:
                self.configs[key["subject"]] = value["compatibilityLevel"]
        # Other Confluent key types (NOOP, MODE, DELETE_SUBJECT, ...) carry nothing we serve.


def _encode(record: dict | None) -> bytes | None:
    # Compact JSON with a fixed field order: compaction matches keys byte for byte.
    return None if record is None else json.dumps(record, separators=(",", ":")).encode()


def _schema_key(subject: str, version: int) -> dict:
    return {"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}


def _config_key(subject: str | None) -> dict:
    return {"keytype": "CONFIG", "subject": subject, "magic": 0}


class SchemaStore:
    """Subjects, versions and compatibility settings, replayed from and written to Kafka."""

    def __init__(self, bootstrap: Connection, topic: str = "_schemas", timeout: float = 10.0):
        """``bootstrap``: Kafka's bootstrap servers, or every client property (secured
        brokers)."""
        self.bootstrap = bootstrap
        self.topic = topic
        self.timeout = timeout
        self._state = _State()
        self._producer: Producer | None = None
        self._stale = False

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Create the topic if missing, then rebuild the state from it."""
        self._ensure_topic()
        self._producer_()  # its idempotent producer id (~0.5 s) is fetched meanwhile, not on
        # the first registration
        self._state = self._replay()
        log.info(
            "loaded %d schema versions and %d settings from topic %s (highest id %d)",
            len(self._state.versions), len(self._state.configs), self.topic, self._state.max_id,
        )

    def sync(self) -> None:
        """Before a write: after a failed one, re-read the topic, since that write may have
        landed after all, and the next id and version must account for it."""
        if self._stale:
            self._state = self._replay()
            self._stale = False

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(self.timeout)
            self._producer = None

    def _client_config(self) -> dict:
        # librdkafka would log every reconnect attempt (many a second) while the broker is
        # down; the StoreError raised for the failed operation already says what is wrong.
        return client_config(self.bootstrap, log_level=2)

    def _unreachable(self, what: str, cause: object) -> StoreError:
        if isinstance(cause, KafkaException):
            cause = cause.args[0]
        if is_denied(cause):  # the broker's ACLs, not its reachability
            operation = {"create": "CREATE", "describe": "DESCRIBE_CONFIGS", "read": "READ",
                         "write to": "WRITE"}[what]
            refused = denied(self.bootstrap, operation, f"topic {self.topic}", cause)
            return StoreError(f"{refused.message}; {refused.hint}")
        if isinstance(cause, KafkaError):
            cause = cause.str()  # KafkaError cannot be formatted directly
        elif isinstance(cause, TimeoutError):
            cause = f"no answer within {self.timeout:g} s"
        return StoreError(
            f"cannot {what} schema topic {self.topic!r} on Kafka at "
            f"{servers(self.bootstrap)}: {cause}. "
            "Check that the broker is running and reachable at that address, then retry."
        )

    def _ensure_topic(self) -> None:
        admin = AdminClient(self._client_config())
        spec = NewTopic(
            self.topic, num_partitions=1, replication_factor=-1,
            config={"cleanup.policy": "compact"},
        )
        try:
            admin.create_topics([spec], operation_timeout=self.timeout)[self.topic].result(
                timeout=self.timeout
            )
            await_topics(admin, [self.topic], self.timeout)
            log.info("created compacted topic %s", self.topic)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise self._unreachable("create", exc) from exc
        except Exception as exc:  # timeouts surface as concurrent.futures errors
            raise self._unreachable("create", exc) from exc
        # A wrong existing topic would silently lose schemas (deletion) or reorder them.
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                config = admin.describe_configs([ConfigResource("topic", self.topic)])
                policy = next(iter(config.values())).result(
                    timeout=self.timeout)["cleanup.policy"]
                partitions = admin.list_topics(self.topic,
                                               timeout=self.timeout).topics[self.topic]
                break
            except KafkaException as exc:
                # a topic just created: Kafka's broker learns of it a moment after its
                # controller made it
                if (exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART
                        or time.monotonic() > deadline):
                    raise self._unreachable("describe", exc) from exc
                time.sleep(0.1)
            except Exception as exc:
                raise self._unreachable("describe", exc) from exc
        if policy.value != "compact" or len(partitions.partitions) != 1:
            raise StoreError(
                f"topic {self.topic!r} on {servers(self.bootstrap)} must have "
                "cleanup.policy=compact and "
                f"1 partition, it has cleanup.policy={policy.value} and "
                f"{len(partitions.partitions)} partitions; fix the topic or choose another one."
            )

    def _replay(self) -> _State:
        state = _State()
        consumer = Consumer(reader_config(self._client_config(), "schema-registry"))
        try:
            partition = TopicPartition(self.topic, 0)
            low, high = self._watermarks(consumer, partition)
            if high <= low:
                return state
            consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + self.timeout
            offset = -1
            while offset < high - 1:
                if time.monotonic() > deadline:
                    raise self._unreachable("read", f"stuck at offset {offset} of {high}")
                msg = consumer.poll(0.5)
                if msg is None:
                    # The last offsets may hold no message for us (transaction markers).
                    if consumer.position([partition])[0].offset >= high:
                        break
                    continue
                if msg.error():
                    if passing(msg.error()):  # e.g. just after a broker restart
                        continue
                    raise self._unreachable("read", msg.error())
                offset = msg.offset()
                deadline = time.monotonic() + self.timeout
                try:
                    value = None if msg.value() is None else json.loads(msg.value())
                    state.apply(json.loads(msg.key() or b"null"), value)
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    log.warning("skipping unreadable record %s@%d: %s", self.topic, offset, exc)
        except KafkaException as exc:
            raise self._unreachable("read", exc) from exc
        finally:
            consumer.close()
        return state

    def _watermarks(self, consumer: Consumer, partition: TopicPartition) -> tuple[int, int]:
        """The topic's offsets; a broker that has just started answers "not leader" for a
        moment (its partitions are still loading), which is waited out, not reported."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return consumer.get_watermark_offsets(partition, timeout=self.timeout)
            except KafkaException as exc:
                if not passing(exc.args[0]) or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    # -- writes: to Kafka first, then to memory --------------------------------------------

    def _producer_(self) -> Producer:
        if self._producer is None:
            self._producer = Producer({
                **self._client_config(),
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": int(self.timeout * 1000),
            })
            self._producer.poll(0)
        return self._producer

    def _write(self, key: dict, value: dict | None) -> None:
        if self._stale:
            raise StoreError("sync() must follow a failed write before the next one")
        self._producer_()
        outcome: list = []
        encoded = _encode(value)
        try:
            self._producer.produce(
                self.topic, key=_encode(key), value=encoded, partition=0,
                on_delivery=lambda err, _msg: outcome.append(err),
            )
            self._producer.flush(self.timeout + 5)
        except (KafkaException, BufferError) as exc:
            outcome.append(exc)
        if outcome != [None]:
            error = outcome[0].args[0] if outcome and isinstance(outcome[0], KafkaException) \
                else (outcome or [None])[0]
            if isinstance(error, KafkaError) and error.code() == KafkaError.MSG_SIZE_TOO_LARGE:
                raise RecordTooLarge(
                    f"The schema is too large to store: its record of {len(encoded or b'')} bytes"
                    f" exceeds what Kafka accepts in topic {self.topic!r} (the topic's"
                    " max.message.bytes, 1 MB by default). Register a smaller schema.")
            # A producer that failed may be stuck (fatal idempotence state): start afresh.
            self._producer = None
            self._stale = True
            cause = outcome[0] if outcome else "no acknowledgement in time"
            raise self._unreachable("write to", cause)
        self._state.apply(key, value)

    def put_version(self, version: Version) -> None:
        self._write(
            _schema_key(version.subject, version.version),
            {
                "subject": version.subject,
                "version": version.version,
                "id": version.id,
                "schema": version.schema,
                "deleted": version.deleted,
            },
        )

    def drop_version(self, subject: str, version: int) -> None:
        """Hard delete: a tombstone, which compaction eventually removes with the record."""
        self._write(_schema_key(subject, version), None)

    def put_config(self, subject: str | None, level: str) -> None:
        self._write(_config_key(subject), {"compatibilityLevel": level})

    def drop_config(self, subject: str | None) -> None:
        self._write(_config_key(subject), None)

    # -- queries ---------------------------------------------------------------------------

    def subjects(self) -> list[str]:
        """Every subject with at least one version, soft-deleted ones included."""
        return sorted({subject for subject, _ in self._state.versions})

    def versions(self, subject: str) -> list[Version]:
        """All versions of a subject, oldest first, soft-deleted ones included."""
        return sorted(
            (v for v in self._state.versions.values() if v.subject == subject),
            key=lambda v: v.version,
        )

    def by_id(self, schema_id: int) -> list[Version]:
        return sorted(
            (v for v in self._state.versions.values() if v.id == schema_id),
            key=lambda v: (v.subject, v.version),
        )

    def id_for(self, schema_text: str) -> int | None:
        """The global id already given to this schema under any subject, if any."""
        wanted = canonical(schema_text)
        return next((v.id for v in self._state.versions.values() if v.canonical == wanted), None)

    def next_id(self) -> int:
        return self._state.max_id + 1

    def config(self, subject: str | None) -> str | None:
        return self._state.configs.get(subject)
