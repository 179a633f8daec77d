"""Prometheus metrics of the capture (served with --metrics-port)."""

from prometheus_client import Counter, Gauge, start_http_server

EVENTS = Counter("bottler_capture_events", "Change events published", ["table", "op"])
CONFIRMED_LSN = Gauge("bottler_capture_confirmed_lsn", "Last WAL position confirmed to Postgres")
LAG_BYTES = Gauge("bottler_capture_lag_bytes", "WAL bytes sent by Postgres but not yet confirmed")
SPOOLED_BYTES = Gauge("bottler_capture_spooled_bytes",
                      "Bytes of streamed transactions staged on local disk until they commit")
IN_FLIGHT = Gauge("bottler_capture_in_flight_messages", "Messages awaiting Kafka's ack")
SNAPSHOT_ROWS = Gauge("bottler_capture_snapshot_rows", "Rows copied by the snapshot", ["table"])
SNAPSHOT_DONE = Gauge("bottler_capture_snapshot_complete", "1 once the snapshot is complete")
STREAMING = Gauge("bottler_capture_streaming", "1 while the replication stream is open")
DATA_ERRORS = Counter("bottler_capture_skipped_rows", "Rows skipped under --on-error=log")
DEAD_LETTERS = Counter("bottler_capture_dead_letters",
                       "Rows sent to the capture's dead-letter topic", ["table"])
SLOT_RETAINED_WAL = Gauge(
    "bottler_capture_slot_retained_wal_bytes",
    "WAL the server keeps for the slot (current WAL position - restart_lsn); NaN if unknown",
)
SLOT_SAFE_WAL = Gauge(
    "bottler_capture_slot_safe_wal_bytes",
    "WAL that may still be written before the slot is invalidated (pg_replication_slots."
    "safe_wal_size); NaN without max_slot_wal_keep_size, or if unknown",
)
SLOT_WAL_STATUS = Gauge("bottler_capture_slot_wal_status",
                        "1 for the slot's wal_status (reserved, extended, unreserved, lost)",
                        ["status"])
for _gauge in (SLOT_RETAINED_WAL, SLOT_SAFE_WAL):
    _gauge.set(float("nan"))  # not 0 ("nothing retained") until the slot watch measures it


def serve(port: int, host: str = "127.0.0.1") -> None:
    """Serve the metrics on ``host`` (--metrics-host); the slot's figures are set by the slot
    watch (slot_health.py)."""
    start_http_server(port, addr=host)
