"""The instances of each view sharing a consumer group (`--join-group`), and the partitions each
one holds, as the broker's group coordinator tells them."""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from bottler.status.figures import Instance, Unavailable
from bottler.status.topics import HIDDEN_PREFIXES
from common.kafka import Connection, client_config, described


class GroupReader:
    def __init__(self, bootstrap: Connection, timeout: float = 3.0):
        self.bootstrap = bootstrap
        self.timeout = timeout
        self._admin = AdminClient(client_config(bootstrap, log_level=0))

    def read(self) -> list[Instance]:
        """Every member of a group that holds partitions; a view assigned by hand (without
        --join-group) is a group without members and is not listed."""
        try:
            listed = self._admin.list_consumer_groups(request_timeout=self.timeout).result()
            names = sorted(g.group_id for g in listed.valid)
            if not names:
                return []
            descriptions = self._admin.describe_consumer_groups(
                names, request_timeout=self.timeout)
            instances = []
            for name, future in sorted(descriptions.items()):
                for member in future.result().members:
                    held: dict[str, list[int]] = {}
                    assignment = member.assignment.topic_partitions if member.assignment else []
                    for tp in assignment:
                        if not tp.topic.startswith(HIDDEN_PREFIXES):
                            held.setdefault(tp.topic, []).append(tp.partition)
                    if held:
                        instances.append(Instance(
                            name, member.group_instance_id or member.client_id,
                            (member.host or "").lstrip("/"),
                            {t: sorted(p) for t, p in sorted(held.items())}))
        except KafkaException as exc:
            reason = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else exc
            raise Unavailable(f"Kafka at {described(self.bootstrap)}: {reason}") from None
        return instances
