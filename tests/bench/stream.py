"""The capture's stream rate on the decode ceilings' data, in the same two modes:

- catch-up: the rows are committed while the capture is stopped; it is started again (resuming
  its slot) and timed from its "streaming from slot" log line, as pg_recvlogical --endpos is
  timed from its start;
- live: the capture streams while the rows are inserted; timed from the commit.

Either ends when the topic holds every row (Kafka acknowledged them all); the moment the slot's
confirmed_flush_lsn passes the end of the insert's WAL is reported too. Between measurements
the capture is stopped and its table topic deleted (see kafka.delete_topics), then resumed.
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from tests.bench import data
from tests.bench.ceilings import drop_slot
from tests.bench.kafka import TopicWatch, delete_topics
from tests.bench.latency import TOPIC_CONFIG
from tests.bench.procs import CaptureProcess, CpuMeter
from tests.bench.pyspy import sampled
from tests.bench.report import Figure, Target

STREAMING = r"streaming from slot"
TIMEOUT = 600  # seconds for every row to reach Kafka
CONFIRM_TIMEOUT = 30  # seconds more for the slot's confirmed position to follow


class StreamBench:
    def __init__(self, dsn: str, bootstrap: str, env: dict[str, str], table: str,
                 cpu_roots: dict[str, int | None], profile: Path | None = None):
        self.dsn = dsn
        self.bootstrap = bootstrap
        self.table = table
        self.slot = table  # one slot (and publication) per table: each run starts afresh
        drop_slot(dsn, self.slot)
        self.capture = CaptureProcess(table, env, [
            "--tables", f"public.{table}", "--slot", self.slot, "--topic-prefix", table,
            "--snapshot-workers", "1", *TOPIC_CONFIG,
        ])
        self.topic = f"{table}.{table}"
        self.watch = TopicWatch(bootstrap, self.topic)
        self.cpu_roots = cpu_roots
        self.profile = profile
        self.next_id = 1
        self.in_topic = 0  # messages in the table topic

    def _meter(self) -> CpuMeter:
        return CpuMeter({**self.cpu_roots, "capture": self.capture.pid}).start()

    def fresh_topic(self) -> None:
        """Stop the capture, delete its table topic, resume it, and stream one row through it
        (the topic exists again, the table's codec is built)."""
        self.capture.stop()
        delete_topics(self.bootstrap, self.topic)
        self.watch.forget()
        self.capture.start()
        self.capture.wait_line(STREAMING)
        data.fill(self.dsn, self.table, self.next_id, 1)
        self.next_id += 1
        self._in_kafka(1, CpuMeter({}))
        self.in_topic = 1

    def catch_up(self, rows: int, transactions: int, ceiling: Figure) -> Figure:
        data.create_table(self.dsn, self.table)
        self.capture.start()  # slot, publication, empty snapshot, stream
        self.capture.wait_line(STREAMING)
        self.capture.stop()
        _, end = data.fill(self.dsn, self.table, self.next_id, rows, transactions)
        self.next_id += rows
        self.capture.start()  # resumes the slot: no snapshot
        started, _ = self.capture.wait_line(STREAMING)
        with sampled(self.profile, "stream-catch-up", self.capture.pid):
            in_kafka, cpu = self._in_kafka(rows, self._meter())
        confirmed = self._confirmed(end)
        self.in_topic = rows
        elapsed = in_kafka - started
        return Figure(
            "capture stream, catch-up: restart → all rows in Kafka", rows / elapsed, "rows/s",
            ceiling=ceiling, target=Target(">=", 0.7, "ratio"),
            notes=[f"{rows:,} rows committed while the capture was stopped; {elapsed:.1f} s "
                   "from its 'streaming from slot' line to the last row acknowledged by Kafka; "
                   + _confirmed_note(confirmed, in_kafka), cpu],
        )

    def live(self, rows: int, transactions: int, ceiling: Figure) -> list[Figure]:
        """A running capture streams while ``rows`` more are inserted."""
        self.fresh_topic()
        meter = self._meter()
        with sampled(self.profile, "stream-live", self.capture.pid):
            committed, end = data.fill(self.dsn, self.table, self.next_id, rows, transactions)
            in_kafka, cpu = self._in_kafka(self.in_topic + rows, meter)
        confirmed = self._confirmed(end)
        self.next_id += rows
        self.in_topic += rows
        elapsed = in_kafka - committed
        figures = [Figure(
            "capture stream, live: commit → all rows in Kafka", rows / elapsed, "rows/s",
            ceiling=ceiling, target=Target(">=", 0.7, "ratio"),
            notes=[f"{rows:,} rows inserted while the capture streams; {elapsed:.1f} s from the "
                   "commit to the last row acknowledged by Kafka; "
                   + _confirmed_note(confirmed, in_kafka), cpu + " (the insert included)"],
        )]
        if confirmed is not None:
            figures.append(Figure(
                "capture stream, live: commit → slot confirmed past it",
                rows / (confirmed - committed), "rows/s", ceiling=ceiling,
                notes=[f"{confirmed - committed:.1f} s until pg_replication_slots."
                       "confirmed_flush_lsn passed the WAL end of the insert"],
            ))
        return figures

    def _in_kafka(self, expected: int, meter: CpuMeter) -> tuple[float, str]:
        """When the topic held ``expected`` messages, and the CPU used until then."""
        at = self.watch.reached(expected, TIMEOUT, self.capture.check_alive)
        return at, meter.note()

    def _confirmed(self, end_lsn: int) -> float | None:
        """When the slot's confirmed_flush_lsn reached ``end_lsn``; None if not within
        CONFIRM_TIMEOUT."""
        deadline = time.monotonic() + CONFIRM_TIMEOUT
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                if (data.confirmed_lsn(conn, self.slot) or 0) >= end_lsn:
                    return time.monotonic()
                time.sleep(0.02)
        return None

    def close(self) -> None:
        self.capture.stop()
        self.watch.close()
        delete_topics(self.bootstrap, f"{self.table}.")
        drop_slot(self.dsn, self.slot)


def _confirmed_note(confirmed: float | None, in_kafka: float) -> str:
    if confirmed is None:
        return (f"the slot's confirmed_flush_lsn did not pass the insert's WAL end within "
                f"{CONFIRM_TIMEOUT} s after that")
    return (f"the slot's confirmed_flush_lsn passed the insert's WAL end "
            f"{confirmed - in_kafka:.1f} s after that")
