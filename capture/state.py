"""The capture's own progress, kept in the compacted `_bottler.capture` topic keyed by slot: a
slot that exists while its snapshot never completed (a crash mid-snapshot) must be recreated,
since its exported snapshot is gone."""

from __future__ import annotations

import json
import uuid

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from capture import topics
from common.errors import BottlerError
from schemas.topics import STATE, with_prefix

SNAPSHOT_STARTED = "started"
SNAPSHOT_COMPLETE = "complete"
SNAPSHOT_SKIPPED = "skipped"


class CaptureState:
    def __init__(self, bootstrap: str, prefix: str, extra_config: dict[str, str] | None = None):
        self.bootstrap = bootstrap
        self.topic = with_prefix(prefix, STATE)
        self.extra = extra_config or {}

    def read(self, slot: str) -> dict | None:
        """The slot's last recorded state, read from the start of the topic to its end."""
        consumer = Consumer({
            **self.extra, "bootstrap.servers": self.bootstrap,
            "group.id": f"bottler-state-{uuid.uuid4().hex}", "enable.auto.commit": False,
        })
        try:
            state = None
            partition = TopicPartition(self.topic, 0, 0)
            _, high = consumer.get_watermark_offsets(partition, timeout=10)
            if high == 0:
                return None
            consumer.assign([partition])
            position = 0
            while position < high:
                msg = consumer.poll(10)
                if msg is None:
                    raise BottlerError(f"cannot read the capture state from {self.topic}")
                if msg.error():
                    raise BottlerError(f"cannot read {self.topic}: {msg.error().str()}")
                position = msg.offset() + 1
                if msg.key() == slot.encode():
                    state = json.loads(msg.value()) if msg.value() else None
            return state
        except KafkaException as exc:
            raise topics.unreachable_broker(exc.args[0].str(), self.bootstrap) from None
        finally:
            consumer.close()

    def write(self, slot: str, **state) -> None:
        producer = Producer({**self.extra, "bootstrap.servers": self.bootstrap,
                             "enable.idempotence": True, "acks": "all"})
        errors = []
        producer.produce(self.topic, key=slot.encode(), value=json.dumps(state).encode(),
                         on_delivery=lambda err, _: errors.append(err) if err else None)
        if producer.flush(30) or errors:
            raise BottlerError(
                f"cannot record the capture state in {self.topic}: "
                f"{errors[0].str() if errors else 'no acknowledgement'}"
            )
