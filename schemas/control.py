"""Schemas of the control events (truncate, transaction boundaries, heartbeats), which go to
non-compacted topics beside the table topics."""

NAMESPACE = "bottler.control"

TRUNCATE = {
    "type": "record", "name": "Truncate", "namespace": NAMESPACE,
    "doc": "A table was truncated: every message of `topic` before `offsets` is void.",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "schema", "type": "string"},
        {"name": "table", "type": "string"},
        {"name": "lsn", "type": "long", "doc": "WAL position of the truncating transaction"},
        {"name": "commit_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "offsets", "type": {"type": "map", "values": "long"},
         "doc": "partition (as a string) → the table topic's end offset at the truncate"},
        {"name": "cascade", "type": "boolean"},
        {"name": "restart_identity", "type": "boolean"},
    ],
}

TRANSACTION = {
    "type": "record", "name": "Transaction", "namespace": NAMESPACE,
    "fields": [
        {"name": "event", "type": {"type": "enum", "name": "Boundary",
                                   "symbols": ["BEGIN", "COMMIT"]}},
        {"name": "xid", "type": ["null", "long"], "default": None},
        {"name": "lsn", "type": "long"},
        {"name": "commit_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ],
}

HEARTBEAT = {
    "type": "record", "name": "Heartbeat", "namespace": NAMESPACE,
    "fields": [
        {"name": "slot", "type": "string"},
        {"name": "lsn", "type": "long"},
        {"name": "sent_at", "type": "string", "doc": "the source's now() when it was emitted"},
    ],
}
