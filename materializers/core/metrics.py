"""Prometheus metrics of the materializers (the default registry; labelled by materializer)."""

from collections import Counter as Tally
from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

LAG = Gauge(
    "bottler_materializer_lag_messages",
    "messages between the materializer's position and the partition's high watermark",
    ["materializer", "topic", "partition"],
)
CHANGES = Counter(
    "bottler_materializer_changes_total", "changes applied (flushed)", ["materializer", "op"]
)
BATCHES = Counter("bottler_materializer_batches_total", "batches flushed", ["materializer"])
BATCH_SECONDS = Histogram(  # observed by the warehouse job (a Spark micro-batch, read to commit)
    "bottler_materializer_batch_seconds", "a batch's duration, read to commit", ["materializer"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300),
)
DEAD_LETTERS = Counter(
    "bottler_materializer_dead_letters_total", "messages sent to the dead-letter topic",
    ["materializer", "topic"],
)
CAUGHT_UP = Gauge(
    "bottler_materializer_caught_up", "1 once every assigned partition reached its end",
    ["materializer"],
)


def count_changes(materializer: str, changes: Iterable) -> None:
    """Count flushed changes by their ``op`` (one increment per op, not per change)."""
    for op, n in Tally(change.op for change in changes).items():
        CHANGES.labels(materializer, op).inc(n)
