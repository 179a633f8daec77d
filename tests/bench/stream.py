"""The capture's stream rate on the decode ceilings' data, in the same two modes:

- catch-up: the rows are committed while the capture is stopped; it is started again (resuming
  its slot) and timed from its "streaming from slot" log line, as pg_recvlogical --endpos is
  timed from its start;
- live: the capture streams while the rows are inserted; timed from the commit.

Either ends when the topic holds every row (Kafka acknowledged them all); the moment the slot's
confirmed_flush_lsn passes the end of the insert's WAL is reported too.
"""

from __future__ import annotations

import time

import psycopg

from tests.bench import data
from tests.bench.kafka import TopicWatch
from tests.bench.procs import CaptureProcess, CpuMeter
from tests.bench.report import Figure, Target

STREAMING = r"streaming from slot"
TIMEOUT = 600  # seconds for every row to reach Kafka
CONFIRM_TIMEOUT = 60  # seconds more for the slot's confirmed position to follow


class StreamBench:
    def __init__(self, dsn: str, bootstrap: str, env: dict[str, str], table: str,
                 cpu_roots: dict[str, int | None]):
        self.dsn = dsn
        self.table = table
        self.slot = "bench_stream"
        self.capture = CaptureProcess("stream", env, [
            "--tables", f"public.{table}", "--slot", self.slot, "--topic-prefix", "bench",
            "--snapshot-workers", "1",
        ])
        self.topic = f"bench.{table}"
        self.watch = TopicWatch(bootstrap, self.topic)
        self.cpu_roots = cpu_roots
        self.rows_in_topic = 0

    def _meter(self) -> CpuMeter:
        return CpuMeter({**self.cpu_roots, "capture": self.capture.pid}).start()

    def catch_up(self, rows: int, transactions: int, ceiling: Figure) -> Figure:
        data.create_table(self.dsn, self.table)
        self.capture.start()  # slot, publication, empty snapshot, stream
        self.capture.wait_line(STREAMING)
        self.capture.stop()
        _, end = data.fill(self.dsn, self.table, 1, rows, transactions)
        self.capture.start()  # resumes the slot: no snapshot
        started, _ = self.capture.wait_line(STREAMING)
        meter = self._meter()
        in_kafka, confirmed = self._finish(rows, end)
        self.rows_in_topic = rows
        elapsed = in_kafka - started
        return Figure(
            "capture stream, catch-up: restart → all rows in Kafka", rows / elapsed, "rows/s",
            ceiling=ceiling, target=Target(">=", 0.7, "ratio"),
            notes=[f"{rows:,} rows committed while the capture was stopped; {elapsed:.1f} s "
                   "from its 'streaming from slot' line to the last row acknowledged by Kafka; "
                   f"{_confirmed_note(confirmed, started)}", meter.note()],
        )

    def live(self, rows: int, transactions: int, ceiling: Figure) -> list[Figure]:
        """The capture (left running by catch_up) streams while ``rows`` more are inserted."""
        meter = self._meter()
        first = self.rows_in_topic + 1
        committed, end = data.fill(self.dsn, self.table, first, rows, transactions)
        in_kafka, confirmed = self._finish(self.rows_in_topic + rows, end)
        self.rows_in_topic += rows
        elapsed = in_kafka - committed
        cpu = meter.note()
        figures = [Figure(
            "capture stream, live: commit → all rows in Kafka", rows / elapsed, "rows/s",
            ceiling=ceiling, target=Target(">=", 0.7, "ratio"),
            notes=[f"{rows:,} rows inserted while the capture streams; {elapsed:.1f} s from the "
                   "commit to the last row acknowledged by Kafka", cpu],
        )]
        if confirmed is not None:
            figures.append(Figure(
                "capture stream, live: commit → slot confirmed past the commit",
                rows / (confirmed - committed), "rows/s", ceiling=ceiling,
                notes=[f"{confirmed - committed:.1f} s until pg_replication_slots."
                       "confirmed_flush_lsn passed the WAL end of the insert, "
                       f"{confirmed - in_kafka:.1f} s after Kafka had every row"],
            ))
        return figures

    def _finish(self, expected: int, end_lsn: int) -> tuple[float, float | None]:
        """When the topic held ``expected`` messages, and when the slot confirmed ``end_lsn``
        (None if not within CONFIRM_TIMEOUT of the former)."""
        in_kafka = confirmed = None
        deadline = None
        give_up = time.monotonic() + TIMEOUT
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while confirmed is None and (deadline is None or time.monotonic() < deadline):
                now = time.monotonic()
                if in_kafka is None and self.watch.end() >= expected:
                    in_kafka = now
                    deadline = now + CONFIRM_TIMEOUT
                if (data.confirmed_lsn(conn, self.slot) or 0) >= end_lsn:
                    confirmed = now
                    in_kafka = in_kafka or now
                if in_kafka is None:
                    self.capture.check_alive()
                    if now > give_up:
                        raise RuntimeError(f"{self.topic} still lacks rows after {TIMEOUT} s")
                time.sleep(0.02)
        return in_kafka, confirmed

    def close(self) -> None:
        self.capture.stop()
        self.watch.close()


def _confirmed_note(confirmed: float | None, started: float) -> str:
    if confirmed is None:
        return f"the slot was not confirmed past the insert within {CONFIRM_TIMEOUT} s"
    return f"confirmed_flush_lsn passed the insert's WAL end {confirmed - started:.1f} s after start"
