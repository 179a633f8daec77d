"""The broker's topics and how many messages each one holds."""

from __future__ import annotations

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from bottler.status.figures import Topic, Unavailable
from common.kafka import Connection, client_config, client_failure, described

# The broker's own topics and the schema registry's: not the appliance's business.
HIDDEN_PREFIXES = ("__", "_schemas")


class TopicReader:
    """Lists every topic and sums its partitions' high watermarks. Topics are listed, never
    asked for by name: some brokers create a topic whose metadata is requested."""

    def __init__(self, bootstrap: Connection, timeout: float = 3.0):
        self.bootstrap = bootstrap
        self.timeout = timeout
        # log_level 0: librdkafka's reconnect messages would scroll through the live view.
        self._errors: list = []  # the client's own, more telling than a timeout
        self._admin = AdminClient({**client_config(bootstrap), "log_level": 0,
                                   "error_cb": self._errors.append})

    def read(self) -> list[Topic]:
        try:
            metadata = self._admin.list_topics(timeout=self.timeout)
            shown = {name: t for name, t in metadata.topics.items()
                     if not name.startswith(HIDDEN_PREFIXES) and t.error is None}
            latest = {TopicPartition(name, p): OffsetSpec.latest()
                      for name, t in shown.items() for p in t.partitions}
            messages = dict.fromkeys(shown, 0)
            if latest:
                futures = self._admin.list_offsets(latest, request_timeout=self.timeout)
                for tp, future in futures.items():
                    messages[tp.topic] += max(future.result().offset, 0)
        except KafkaException as exc:
            cause = client_failure(self._admin, self._errors, exc)
            reason = cause.str() if hasattr(cause, "str") else cause
            raise Unavailable(f"Kafka at {described(self.bootstrap)}: {reason}") from None
        return [Topic(name, len(shown[name].partitions), messages[name])
                for name in sorted(shown)]
