"""The Kafka clients' settings every loop starts from, declared once: the consumer of a view
(the replica, the search view, a translator) and the idempotent producer (the dead letters, a
translator's transactional one). Each loop adds what is its own on top (a translator reads
committed data only; the consumer loop sizes its prefetch), the user's overrides last."""

from __future__ import annotations

from typing import Any

from common.kafka import Connection, client_config

# Instances sharing a group: a killed one's partitions move on after this long without heartbeat.
# The assignment is eager (range, roundrobin): a rebalance takes every partition back, between
# two batches (materializers/core/consumer.py).
GROUP_SETTINGS = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
                  "partition.assignment.strategy": "range,roundrobin"}


def consumer_config(bootstrap: Connection, group_id: str, *, join_group: bool = False,
                    instance_id: str | None = None, client_id: str | None = None,
                    ours: dict[str, Any] | None = None,
                    overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """A loop's consumer: offsets committed by the loop only, after what they cover is written;
    from the start of a partition with none; no end-of-partition events. ``join_group``: one
    instance of several in ``group_id``, with static membership under ``instance_id`` (an
    instance its supervisor restarts within the session timeout takes its partitions back with
    no rebalance; a dead one's move to the others once its session expires) and ``client_id``
    (how `bottler status` names it). ``ours``: the loop's own settings; ``overrides``: the
    user's."""
    return {
        **client_config(bootstrap),
        "group.id": group_id,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        # librdkafka's default, said: a Kafka transaction (a streamed transaction's rows, a
        # translator's batch) is seen whole once committed, never in part, never if aborted
        "isolation.level": "read_committed",
        **(ours or {}),
        **(GROUP_SETTINGS if join_group else {}),
        **({"group.instance.id": instance_id} if join_group and instance_id else {}),
        **({"client.id": client_id} if join_group and client_id else {}),
        **(overrides or {}),
    }


def producer_config(bootstrap: Connection, **ours: Any) -> dict[str, Any]:
    """An idempotent producer (no duplicate on a retried send), with ``ours`` on top."""
    return {**client_config(bootstrap), "enable.idempotence": True, **ours}
