"""A large transaction, protocol 1 against streamed (issue 29): one UPDATE of every row of a
table of ``rows`` rows in one transaction, captured by a capture with
`--stream-large-transactions off` (pgoutput protocol 1: the source decodes it at its commit,
spilling past logical_decoding_work_mem), then by one with `on` (streamed while it runs, staged
on the capture's disk, published at its commit in one Kafka transaction), each on a slot of its
own made just before, the server's default logical_decoding_work_mem. For each:

- the capture's peak RSS (VmHWM);
- the source's ``spill_bytes`` and ``stream_bytes`` for the slot (pg_stat_replication_slots);
- commit → every row of it in Kafka, as a read_committed reader sees it (the last stable
  offset, so a Kafka transaction counts once committed);
- how long a small transaction committed while the large one runs waits: single-row inserts
  into a second table, one every PROBE_EVERY seconds from the UPDATE's start to its commit, each
  timed from its commit until Kafka holds it (the largest wait, and the median).
"""

from __future__ import annotations

import statistics
import threading
import time

import psycopg
from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from psycopg.conninfo import conninfo_to_dict

from common.kafka import passing
from tests.bench import data
from tests.bench.ceilings import drop_slot
from tests.bench.kafka import delete_topics, wait_until
from tests.bench.procs import CaptureProcess
from tests.bench.report import Figure, Target

TABLE = "bench_large"
PROBES = "bench_large_probe"
PROBE_EVERY = 0.5  # seconds between the small transactions committed during the large one
TIMEOUT = 1800  # seconds for the large transaction to reach Kafka
RSS_TARGET_MB = 300
STREAMING = r"streaming from slot"
MODES = {"protocol 1": "off", "streamed": "on"}


class CommittedEnd:
    """A topic's end as a read_committed reader sees it (its partition 0's last stable
    offset), 0 while the topic does not exist."""

    def __init__(self, bootstrap: str, topic: str):
        self.topic = topic
        self.admin = AdminClient({"bootstrap.servers": bootstrap})

    def __call__(self) -> int:
        if self.topic not in self.admin.list_topics(timeout=10).topics:
            return 0
        tp = TopicPartition(self.topic, 0)
        answer = self.admin.list_offsets({tp: OffsetSpec.latest()},
                                         isolation_level=IsolationLevel.READ_COMMITTED)
        try:
            return answer[tp].result(timeout=10).offset
        except KafkaException as exc:
            if passing(exc.args[0]):  # a topic just made: no leader yet
                return 0
            raise


def large_transactions(dsn: str, bootstrap: str, env: dict[str, str], rows: int,
                       say=print) -> list[Figure]:
    say(f"large transaction: filling {TABLE} with {rows:,} rows")
    data.create_table(dsn, TABLE)
    data.fill(dsn, TABLE, 1, rows)
    data.vacuum(dsn, TABLE)
    data.create_table(dsn, PROBES)
    figures: list[Figure] = []
    database = conninfo_to_dict(dsn)["dbname"]
    try:
        # The transaction ~16 times the decoding memory at any --rows: the server's default
        # (64 MB) at 5M rows, less for a small run, whose walsenders (started after) take it.
        _execute(dsn, f"alter database {database} set logical_decoding_work_mem = "
                      f"'{work_mem_kb(rows)}kB'")
        for name, mode in MODES.items():
            say(f"large transaction: a {rows:,}-row UPDATE, {name}")
            figures += _run(dsn, bootstrap, env, rows, name, mode)
    finally:
        _execute(dsn, f"alter database {database} reset logical_decoding_work_mem")
        data.drop_table(dsn, TABLE)
        data.drop_table(dsn, PROBES)
    return figures


def work_mem_kb(rows: int) -> int:
    """logical_decoding_work_mem for a ``rows``-row UPDATE: about a sixteenth of its decoded
    size (~200 B a row: old key, new row), between 64 kB and 64 MB."""
    return max(64, min(64 * 1024, rows * 200 // 16 // 1024))


def _execute(dsn: str, statement: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(statement)


def _slot_stats(dsn: str, slot: str) -> dict[str, int]:
    """The slot's spill and stream bytes, once the server counted the large transaction
    (counted once decoded: a little after its last row went out)."""
    query = ("select spill_bytes, stream_bytes, total_bytes from pg_stat_replication_slots "
             "where slot_name = %s")
    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 30
        while True:
            spill, stream, total = conn.execute(query, (slot,)).fetchone()
            if spill + stream > 0 or time.monotonic() > deadline:
                return {"spill_bytes": spill, "stream_bytes": stream, "total_bytes": total}
            time.sleep(0.2)


def _run(dsn: str, bootstrap: str, env: dict[str, str], rows: int, name: str,
         mode: str) -> list[Figure]:
    slot = f"bench_large_{mode}"
    drop_slot(dsn, slot)
    capture = CaptureProcess(slot, env, [
        "--tables", f"public.{TABLE},public.{PROBES}", "--slot", slot, "--topic-prefix", slot,
        "--skip-snapshot", "--stream-large-transactions", mode,
    ])
    big, probes = (CommittedEnd(bootstrap, f"{slot}.{t}") for t in (TABLE, PROBES))
    try:
        capture.start()
        capture.wait_line(STREAMING)
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("select pg_stat_reset_replication_slot(%s)", (slot,))
        prober = _Prober(dsn, probes, capture)
        prober.start()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"update {TABLE} set a = md5(a)")  # noqa: S608 - ours
            committed = time.monotonic()
        prober.stop()
        # every 0.1 s: each look is two requests to the broker, whose CPU the capture's
        # replay shares (50 a second cost it a fifth of a core, "Session 19: the cut" in
        # docs/benchmarks.md); the streamed transaction shows whole at its Kafka commit, so
        # the figure is late by 0.1 s at most
        in_kafka = wait_until(lambda: capture.check_alive() or big() >= rows, TIMEOUT,
                              f"{rows:,} rows in {slot}.{TABLE}", every=0.1)
        waits = prober.waits()
        stats = _slot_stats(dsn, slot)
        capture.stop()
    finally:
        capture.stop()
        delete_topics(bootstrap, f"{slot}.")
        drop_slot(dsn, slot)
    took = in_kafka - committed
    return [
        Figure(f"large transaction, {name}: capture RSS peak", capture.peak_mb, "MB",
               target=Target("<", RSS_TARGET_MB),
               notes=[f"VmHWM of the capture over a {rows:,}-row UPDATE in one transaction; "
                      f"the source spilled {stats['spill_bytes'] / 2**20:,.0f} MB and streamed "
                      f"{stats['stream_bytes'] / 2**20:,.0f} MB for its slot "
                      "(pg_stat_replication_slots)"]),
        Figure(f"large transaction, {name}: source spill", stats["spill_bytes"] / 2**20, "MB",
               notes=["pg_stat_replication_slots.spill_bytes of the capture's slot"]),
        Figure(f"large transaction, {name}: commit → last row in Kafka", took, "s",
               notes=[f"{rows / took:,.0f} rows/s, as a read_committed reader sees them (the "
                      "last stable offset)"]),
        Figure(f"large transaction, {name}: small transaction's wait, largest", max(waits),
               "s", notes=[f"{len(waits)} single-row inserts committed while the UPDATE ran, "
                           f"each timed until Kafka held it; median "
                           f"{statistics.median(waits):.2f} s"]),
    ]


class _Prober:
    """Single-row transactions committed every PROBE_EVERY seconds until stopped, and the
    probe topic watched meanwhile: each one's wait, from its commit until Kafka holds it."""

    def __init__(self, dsn: str, end: CommittedEnd, capture: CaptureProcess):
        self.dsn, self.end, self.capture = dsn, end, capture
        self.commits: list[float] = []
        self.arrivals: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            first = conn.execute(f"select coalesce(max(id), 0) + 1 from {PROBES}").fetchone()[0]  # noqa: S608
            due = time.monotonic() + PROBE_EVERY
            while not self._stop.is_set() or len(self.arrivals) < len(self.commits):
                if not self._stop.is_set() and time.monotonic() >= due:
                    conn.execute(f"insert into {PROBES} values (%s, 'a', 'b', now())",  # noqa: S608
                                 (first + len(self.commits),))
                    self.commits.append(time.monotonic())
                    due += PROBE_EVERY
                held = self.end()
                now = time.monotonic()
                self.arrivals += [now] * (held - len(self.arrivals))
                time.sleep(0.01)

    def stop(self) -> None:
        """No more probes; the ones committed are still watched for (waits())."""
        self._stop.set()

    def waits(self) -> list[float]:
        self._thread.join(TIMEOUT)
        return [a - c for a, c in zip(self.arrivals, self.commits, strict=False)] or [0.0]
