"""Topic creation (names: schemas/topics.py).

Table topics are compacted (an unkeyed table's topic cannot be: Kafka refuses keyless messages
there, so it keeps every message instead). Control events a compacted topic cannot hold go to
non-compacted topics:

| topic | what |
|---|---|
| `[prefix.]_bottler.truncate` | one event per truncated table |
| `[prefix.]_bottler.transactions` | begin/commit boundaries (with `--transaction-topic`) |
| `[prefix.]_bottler.heartbeat` | the capture's heartbeats, with the WAL position reached |

and `[prefix.]_bottler.capture` (compacted) holds each slot's progress, such as whether its
snapshot is complete.

A table topic is created with the partitions asked for (``--partitions``, ``table_partitions``;
the producer's murmur2 partitioner keeps every event of a row in one partition). An existing
topic keeps the count it has: changing it would move keys to other partitions and break the
order of a row's events; a count that differs from the setting is one warning line. Control
topics have one partition: a truncate event is read in order with the others, and it names the
end offset of every partition of its table topic.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from common.errors import BottlerError
from common.kafka import await_topics, denied, is_denied

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicSet:
    """Topics made alike: compacted or plain (time-based deletion), with the same settings;
    ``partitions``: of those created (default: the caller's, else 1)."""

    compacted: Sequence[str] = ()
    plain: Sequence[str] = ()
    config: Mapping[str, str] = field(default_factory=dict)
    partitions: int | None = None

    def wanted(self) -> dict[str, dict[str, str]]:
        """Each topic's settings at its creation."""
        wanted = {t: {**self.config, "cleanup.policy": "compact"} for t in self.compacted}
        return wanted | {t: {**self.config, "cleanup.policy": "delete"} for t in self.plain}


def ensure_topics(
    admin: AdminClient,
    compacted: list[str],
    plain: list[str] = (),
    config: dict[str, str] | None = None,
    partitions: int | None = None,
    created: list[str] | None = None,
) -> None:
    """Create the missing topics; ``config`` (the user's -T settings) applies to all of them,
    to the existing ones (the capture's own) too, so that raising a limit with -T (say
    ``max.message.bytes``, as the oversized-message hint asks) takes effect at the next start.
    New topics get ``partitions`` (default 1); existing ones keep theirs, a different count
    logged once (see the module's doc). Those created are added to ``created`` (a failed start
    removes them again)."""
    ensure_topic_sets(admin, [TopicSet(compacted, plain, config or {})], partitions, created)


def ensure_topic_sets(admin: AdminClient, sets: Sequence[TopicSet], partitions: int | None = None,
                      created: list[str] | None = None) -> None:
    """:func:`ensure_topics` for several sets of topics at once: one look at the broker's
    topics, one request that creates the missing ones, one wait for them (a capture's start
    waits for each)."""
    wanted = {t: (cfg, each.partitions or partitions)
              for each in sets for t, cfg in each.wanted().items()}
    try:
        existing = admin.list_topics(timeout=10).topics
    except KafkaException as exc:
        raise unreachable_broker(exc.args[0].str()) from None
    for each in sets:
        if each.config:
            _alter_configs(admin, [t for t in each.wanted() if t in existing], dict(each.config))
    for topic, (_, count) in wanted.items():
        if count is not None and topic in existing and (
                has := len(existing[topic].partitions)) != count:
            log.warning(
                "topic %s has %d partition%s, the setting asks for %d: kept as it is (a new"
                " count would move rows to other partitions); to change it, capture under a"
                " new --topic-prefix and rebuild the views", topic, has,
                "" if has == 1 else "s", count)
    new = [
        NewTopic(t, num_partitions=count or 1, config=cfg)
        for t, (cfg, count) in wanted.items() if t not in existing
    ]
    if not new:
        return
    failure = None
    for topic, future in admin.create_topics(new).items():
        try:
            future.result(timeout=30)
            if created is not None:
                created.append(topic)
        except KafkaException as exc:
            if is_denied(exc.args[0]):
                failure = failure or denied(None, "CREATE", f"topic {topic}", exc.args[0])
            elif exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                failure = failure or BottlerError(
                    f"cannot create topic {topic}: {exc.args[0].str()}",
                    "check the broker's permissions and the -T topic settings",
                )
    if failure:
        raise failure
    await_topics(admin, [t.topic for t in new])


def _alter_configs(admin: AdminClient, names: list[str], config: dict[str, str]) -> None:
    """Set the ``config`` values that differ on existing topics (IncrementalAlterConfigs)."""
    if not names:
        return
    try:
        described = admin.describe_configs([ConfigResource("topic", t) for t in names])
        current = {r.name: f.result(timeout=30) for r, f in described.items()}
    except KafkaException as exc:
        if is_denied(exc.args[0]):
            raise denied(None, "DESCRIBE_CONFIGS", f"topics {', '.join(names)}",
                         exc.args[0]) from None
        raise BottlerError(f"cannot read the settings of topics {', '.join(names)}: "
                           f"{exc.args[0].str()}", "check the broker and its permissions") from None
    changes = []
    for topic, entries in current.items():
        differ = {k: v for k, v in config.items()
                  if k not in entries or entries[k].value != v}
        if differ:
            changes.append(ConfigResource("topic", topic, incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                for k, v in differ.items()]))
            log.info("topic %s: setting %s", topic,
                     ", ".join(f"{k}={v} (was {entries[k].value if k in entries else 'unset'})"
                               for k, v in differ.items()))
    if not changes:
        return
    for resource, future in admin.incremental_alter_configs(changes).items():
        try:
            future.result(timeout=30)
        except KafkaException as exc:
            if is_denied(exc.args[0]):
                raise denied(None, "ALTER_CONFIGS", f"topic {resource.name}",
                             exc.args[0]) from None
            raise BottlerError(
                f"cannot change the settings of topic {resource.name}: {exc.args[0].str()}",
                "check the -T topic settings and the broker's permissions (AlterConfigs)",
            ) from None
    _settled(admin, [r.name for r in changes], config)


def _settled(admin: AdminClient, names: list[str], config: dict[str, str],
             timeout: float = 15.0) -> None:
    """Wait until the broker reports the new settings: a broker may apply an accepted change a
    moment later, and a message sent before (a row over the old size limit) would be refused."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        described = admin.describe_configs([ConfigResource("topic", t) for t in names])
        try:
            current = {r.name: f.result(timeout=10) for r, f in described.items()}
        except KafkaException:
            current = {}
        if current and all(t in current and all(k in current[t] and current[t][k].value == v
                                                for k, v in config.items()) for t in names):
            return
        time.sleep(0.2)
    log.warning("topics %s: the broker does not report the new settings yet", ", ".join(names))


def unreachable_broker(reason: object, broker: str = "") -> BottlerError:
    at = f" at {broker}" if broker else ""
    return BottlerError(
        f"the Kafka broker{at} is unreachable: {reason}",
        "check --broker (BOTTLER_KAFKA) and that the broker is up",
    )


def end_offsets(admin: AdminClient, topic: str) -> dict[int, int]:
    """Each partition's end offset (the offset the next message will get)."""
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    futures = admin.list_offsets(request)
    return {tp.partition: f.result(timeout=10).offset for tp, f in futures.items()}
