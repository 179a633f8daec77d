"""Consumer settings every reader of a topic's backlog shares, and what a topic prefix may be."""

import re

# librdkafka refuses a fetch response larger than receive.message.max.bytes (100 MB by
# default) and asks again, for ever. Kafka keeps a response within fetch.max.bytes (50 MB by
# default); the embedded broker (noida-db) answers with everything after the offset asked, so
# reading a backlog of more than 100 MB from it (a rebuild of 1.4M rows of ~100 B, say) would
# never start. Reading it takes memory in proportion (about 0.5 KB per message waiting).
BACKLOG_READER = {"receive.message.max.bytes": 1 << 30}

# Kafka's topic names: ASCII letters, digits, '.', '_' and '-', at most 249 characters. A
# prefix is checked up front: a broker that takes another character (noida-db takes '/') still
# leaves names the registry's URLs cannot carry (`<topic>-value` subjects).
_LEGAL = re.compile(r"[A-Za-z0-9._-]*")
PREFIX_MAX = 200  # leaves room for the schema and table names


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` cannot begin topic names, or None if it can."""
    if not _LEGAL.fullmatch(prefix):
        return ("a topic prefix may contain only ASCII letters, digits, '.', '_' and '-'"
                " (Kafka's topic names)")
    if len(prefix) > PREFIX_MAX:
        return f"a topic prefix may be at most {PREFIX_MAX} characters"
    return None
