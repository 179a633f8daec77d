"""Topic ownership: the records by which a capture says which table topics are its own, kept in
its compacted control topic ``[prefix.]_bottler.capture`` beside its progress
records (schemas/progress.py), and read by every view that is given no ``--topic``
(materializers/core/ownership.py) and by ``bottler retire``.

One record per table topic, under the key ``topic/<topic>`` (so compaction keeps the latest per
topic), a JSON object::

    {"kind": "table-topic", "prefix": "shop", "slot": "shop", "schema": "public",
     "table": "orders", "topic": "shop.orders", "key_columns": ["id"], "format": "avro"}

The capture writes it, acknowledged, before the first row of the table reaches the topic: at
every start for each published table, and when a table joins later (an incremental snapshot, a
signal, more ``--tables`` at a restart). A topic stays owned while it exists, also after its
table was dropped (its rows are still the views' to keep); a start that fails removes the topics
it created and leaves a tombstone for each; retiring the capture deletes the whole control topic.
"""

from __future__ import annotations

from typing import Any

KIND = "table-topic"
KEY_PREFIX = "topic/"


def key(topic: str) -> str:
    """The record's key in the control topic."""
    return KEY_PREFIX + topic


def record(prefix: str, slot: str, schema: str, table: str, topic: str,
           key_columns: list[str] | tuple[str, ...], fmt: str) -> dict[str, Any]:
    """The ownership record of ``topic`` (see the module's doc)."""
    return {"kind": KIND, "prefix": prefix, "slot": slot, "schema": schema, "table": table,
            "topic": topic, "key_columns": list(key_columns), "format": fmt}


def is_record(record_key: str, value: Any) -> bool:
    return (record_key.startswith(KEY_PREFIX) and isinstance(value, dict)
            and value.get("kind") == KIND and isinstance(value.get("topic"), str))


def owned(records: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """topic -> its ownership record, from every key's latest record of the control topic."""
    return {v["topic"]: v for k, v in records.items() if is_record(k, v)}
