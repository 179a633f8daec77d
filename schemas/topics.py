"""Topic names: the contract between the capture, which writes the topics, and the
materializers, which read them (docs/capture.md lists them).

Table topics are `[prefix.][schema.]table`, the schema omitted for `public` (Bottled Water's
rule). Control topics live under `[prefix.]_bottler.`.
"""

CONTROL = "_bottler."
TRUNCATE = CONTROL + "truncate"
TRANSACTIONS = CONTROL + "transactions"
HEARTBEAT = CONTROL + "heartbeat"
STATE = CONTROL + "capture"  # the capture's progress per slot
DEAD_LETTER = CONTROL + "dead-letter"  # messages a materializer could not apply


def with_prefix(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def table_topic(prefix: str, schema: str, table: str) -> str:
    return with_prefix(prefix, table if schema == "public" else f"{schema}.{table}")
