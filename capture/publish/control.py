"""Encoding the control events: truncates, transaction boundaries, heartbeats."""

from __future__ import annotations

from capture.publish.encoding import encode_json
from capture.publish.registrar import Registrar
from capture.source.messages import pg_time_to_unix_micros
from schemas import control
from schemas.serde import AvroEncoder
from schemas.topics import HEARTBEAT, TRANSACTIONS, TRUNCATE, with_prefix


def control_topics(prefix: str) -> list[str]:
    """The control topics of the capture of ``prefix``: truncates, transactions, heartbeats."""
    return [with_prefix(prefix, TRUNCATE), with_prefix(prefix, TRANSACTIONS),
            with_prefix(prefix, HEARTBEAT)]


class ControlEvents:
    def __init__(self, prefix: str, fmt: str, registrar: Registrar | None):
        self.truncate_topic, self.transactions_topic, self.heartbeat_topic = control_topics(
            prefix)
        self._encode = {}
        for topic, schema in (
            (self.truncate_topic, control.TRUNCATE),
            (self.transactions_topic, control.TRANSACTION),
            (self.heartbeat_topic, control.HEARTBEAT),
        ):
            if fmt == "avro":
                schema_id = registrar.register(f"{topic}-value", schema)
                self._encode[topic] = AvroEncoder(schema_id, schema).encode
            else:
                self._encode[topic] = encode_json

    def truncate(self, topic, schema, table, lsn, commit_time, offsets, cascade, restart) -> bytes:
        return self._encode[self.truncate_topic]({
            "topic": topic, "schema": schema, "table": table, "lsn": lsn,
            "commit_time": pg_time_to_unix_micros(commit_time),
            "offsets": {str(p): o for p, o in offsets.items()},
            "cascade": cascade, "restart_identity": restart,
        })

    def transaction(self, event: str, xid: int | None, lsn: int, commit_time: int) -> bytes:
        return self._encode[self.transactions_topic]({
            "event": event, "xid": xid, "lsn": lsn,
            "commit_time": pg_time_to_unix_micros(commit_time),
        })

    def heartbeat(self, slot: str, lsn: int, sent_at: str) -> bytes:
        return self._encode[self.heartbeat_topic]({"slot": slot, "lsn": lsn, "sent_at": sent_at})
