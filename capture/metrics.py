"""Prometheus metrics of the capture (served with --metrics-port)."""

import threading

import psycopg
from prometheus_client import Counter, Gauge, start_http_server

EVENTS = Counter("bottler_capture_events", "Change events published", ["table", "op"])
CONFIRMED_LSN = Gauge("bottler_capture_confirmed_lsn", "Last WAL position confirmed to Postgres")
LAG_BYTES = Gauge("bottler_capture_lag_bytes", "WAL bytes sent by Postgres but not yet confirmed")
IN_FLIGHT = Gauge("bottler_capture_in_flight_messages", "Messages awaiting Kafka's ack")
SNAPSHOT_ROWS = Gauge("bottler_capture_snapshot_rows", "Rows copied by the snapshot", ["table"])
SNAPSHOT_DONE = Gauge("bottler_capture_snapshot_complete", "1 once the snapshot is complete")
DATA_ERRORS = Counter("bottler_capture_skipped_rows", "Rows skipped under --on-error=log")
SLOT_RETAINED_WAL = Gauge(
    "bottler_capture_slot_retained_wal_bytes",
    "WAL the server keeps for the slot (current WAL position - restart_lsn); NaN if unknown",
)
SLOT_RETAINED_WAL.set(float("nan"))  # not 0 ("nothing retained") until a probe measures it


def serve(port: int, host: str = "127.0.0.1", dsn: str | None = None,
          slot: str | None = None) -> None:
    """Serve the metrics on ``host`` (--metrics-host); with ``dsn`` and ``slot``, also the
    slot's retained WAL."""
    if dsn and slot:
        SLOT_RETAINED_WAL.set_function(SlotProbe(dsn, slot).retained_wal)
    start_http_server(port, addr=host)


class SlotProbe:
    """Asks the server, at each scrape, how much WAL it retains for the slot: the capture's
    replication stream does not carry restart_lsn. One small query per scrape."""

    QUERY = ("select pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::float8 "
             "from pg_replication_slots where slot_name = %s")

    def __init__(self, dsn: str, slot: str):
        self.dsn, self.slot = dsn, slot
        self._conn: psycopg.Connection | None = None
        self._lock = threading.Lock()  # scrapes are served by several threads

    def retained_wal(self) -> float:
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=3,
                                                 application_name="bottler capture metrics")
                row = self._conn.execute(self.QUERY, (self.slot,)).fetchone()
            except psycopg.Error:  # the capture reports connection trouble itself
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                return float("nan")
            return float("nan") if row is None or row[0] is None else row[0]
