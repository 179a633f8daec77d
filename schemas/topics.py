"""Topic names: the contract between the capture, which writes the topics, and the
materializers, which read them (docs/capture.md lists them).

Table topics are `[prefix.][schema.]table`, the schema omitted for `public` (Bottled Water's
rule). Control topics live under `[prefix.]_bottler.`.
"""

import re

CONTROL = "_bottler."
TRUNCATE = CONTROL + "truncate"
TRANSACTIONS = CONTROL + "transactions"
HEARTBEAT = CONTROL + "heartbeat"
STATE = CONTROL + "capture"  # the capture's progress per slot
DEAD_LETTER = CONTROL + "dead-letter"  # messages a materializer could not apply
CAPTURE_DEAD_LETTER = CONTROL + "capture-dead-letter"  # rows the capture could not publish


def with_prefix(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def table_topic(prefix: str, schema: str, table: str) -> str:
    return with_prefix(prefix, table if schema == "public" else f"{schema}.{table}")


def table_topics(prefix: str, topics: list[str] | None = None, pattern: str | None = None):
    """``topic -> bool`` by name: the ``topics`` listed, or else those matching ``pattern``
    (default: every topic under ``prefix``, or every topic not starting with ``_`` without
    one), never a control topic. For explicit selections (``--topic``, a pattern) and for
    captures that predate topic ownership (``bottler retire``); a view given neither reads the
    topics its capture owns (schemas/ownership.py, materializers/core/ownership.py)."""
    if topics is not None:
        listed = set(topics)
        return listed.__contains__
    control = with_prefix(prefix, CONTROL)
    regex = re.compile(pattern or (f"^{re.escape(prefix)}\\." if prefix else "^[^_]"))

    def is_table_topic(topic: str) -> bool:
        if topic.startswith(control) or (not prefix and topic.startswith("_")):
            return False
        return regex.match(topic) is not None

    return is_table_topic
