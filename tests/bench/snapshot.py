"""The capture's snapshot rate on the COPY ceiling's table: a capture with a fresh slot and
``workers`` snapshot processes, timed from its start until its "snapshot: N rows … (X rows/s)"
log line (written once every row is acknowledged by Kafka), then stopped."""

from __future__ import annotations

from pathlib import Path

from capture.settings import CaptureSettings
from tests.bench.ceilings import drop_slot
from tests.bench.kafka import TopicWatch, delete_topics
from tests.bench.procs import CaptureProcess, CpuMeter, running
from tests.bench.pyspy import sampled
from tests.bench.report import Figure, Target

DEFAULT_WORKERS = CaptureSettings.model_fields["snapshot_workers"].default

DONE = r"snapshot: (\d+) rows .*\(([\d.]+) rows/s\)"


def snapshot(env: dict[str, str], bootstrap: str, table: str, rows: int, workers: int,
             ceiling: Figure, cpu_roots: dict[str, int | None],
             profile: Path | None = None) -> tuple[Figure, CaptureProcess]:
    name = f"bench_snapshot_w{workers}"
    drop_slot(env["BOTTLER_PG_DSN"], name)  # a fresh slot: a snapshot, not a resume
    capture = CaptureProcess(name, env, [
        "--tables", f"public.{table}", "--slot", name, "--topic-prefix", name,
        "--snapshot-workers", str(workers),
    ])
    with running(capture):
        meter = CpuMeter({**cpu_roots, "capture and its workers": capture.pid}).start()
        with sampled(profile, f"snapshot-{workers}-workers", capture.pid, subprocesses=True):
            done, match = capture.wait_line(DONE, timeout=600)
        cpu = meter.note()
        # Its own figure covers the copy only: no start-up, checks, slot creation.
        copied, own_rate = int(match[1]), float(match[2])
    watch = TopicWatch(bootstrap, f"{name}.{table}")
    in_topic = watch.end()
    watch.close()
    delete_topics(bootstrap, f"{name}.")
    drop_slot(env["BOTTLER_PG_DSN"], name)
    if copied != rows or in_topic != rows:
        raise RuntimeError(f"snapshot of {rows:,} rows: the capture reports {copied:,}, "
                           f"the topic holds {in_topic:,}")
    elapsed = done - capture.started_at
    workers_note = (
        f"peak RSS of the main process {capture.peak_mb:.0f} MB, "
        f"of its {len(capture.worker_peaks)} worker process(es) "
        f"{capture.workers_peak_mb:.0f} MB summed"
    )
    figure = Figure(
        f"capture snapshot, {workers} worker{'s' if workers > 1 else ''}: start → done",
        rows / elapsed, "rows/s", ceiling=ceiling,
        # the target is for the default number of workers
        target=Target(">=", 150_000) if workers == DEFAULT_WORKERS else None,
        notes=[f"{rows:,} rows in {elapsed:.1f} s from process start to the snapshot's log line "
               f"(the capture's own figure, copy only: {own_rate:,.0f} rows/s); {workers_note}",
               cpu],
    )
    return figure, capture
