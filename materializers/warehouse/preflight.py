"""What a warehouse run checks before Spark takes its seconds to start: that the table path of
every table topic it is about to read is free for a Delta table of bottler's, or holds one
(delta.open_table). A path that is a file, a directory of other files or a table whose log
cannot be read is then refused at once, untouched. Tables whose topics appear later are checked
as they are first written, as before."""

from __future__ import annotations

import json
from pathlib import Path

from confluent_kafka import Consumer, KafkaException
from confluent_kafka.schema_registry.error import SchemaRegistryError

from common.kafka import Connection, reader_config
from common.registry_client import Registry, registry_client
from materializers.core.changes import table_of
from materializers.core.ownership import OwnedTopics, discover
from materializers.warehouse.delta import open_table
from materializers.warehouse.sink import table_path
from schemas.topics import table_topics


def check_table_paths(root: Path, *, bootstrap: Connection, registry: Registry, prefix: str,
                      topics: list[str] | None) -> OwnedTopics | None:
    """Refuse (BottlerError, one line) the first table path under ``root`` that is not free for
    bottler's Delta table, among those of the table topics found now. Returns the reader of the
    capture's topic ownership it made (None with ``topics``), for the job to go on with: it
    has read the records, and said what it found, once."""
    owned = OwnedTopics(bootstrap, prefix, "warehouse") if topics is None else None
    consumer = Consumer(reader_config(bootstrap, "warehouse-preflight"))
    try:
        found = sorted({t for t, _ in discover(consumer, owned or table_topics(prefix, topics))})
    except KafkaException:  # the broker restarting: the job waits for it, and checks then
        found = []
    finally:
        consumer.close()
    client = registry_client(registry)
    for topic in found:
        try:
            schema = json.loads(client.get_latest_version(f"{topic}-value").schema.schema_str)
        except SchemaRegistryError:
            continue  # no schema yet: the job checks the table's path when it writes it
        if isinstance(schema, dict) and "pg.table" in schema:
            open_table(table_path(root, table_of(schema)))
    return owned
