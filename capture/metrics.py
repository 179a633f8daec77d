"""Prometheus metrics of the capture (served with --metrics-port)."""

from prometheus_client import Counter, Gauge, start_http_server

EVENTS = Counter("bottler_capture_events", "Change events published", ["table", "op"])
CONFIRMED_LSN = Gauge("bottler_capture_confirmed_lsn", "Last WAL position confirmed to Postgres")
LAG_BYTES = Gauge("bottler_capture_lag_bytes", "WAL bytes sent by Postgres but not yet confirmed")
IN_FLIGHT = Gauge("bottler_capture_in_flight_messages", "Messages awaiting Kafka's ack")
SNAPSHOT_ROWS = Gauge("bottler_capture_snapshot_rows", "Rows copied by the snapshot", ["table"])
SNAPSHOT_DONE = Gauge("bottler_capture_snapshot_complete", "1 once the snapshot is complete")
DATA_ERRORS = Counter("bottler_capture_skipped_rows", "Rows skipped under --on-error=log")


def serve(port: int) -> None:
    start_http_server(port, addr="0.0.0.0")
