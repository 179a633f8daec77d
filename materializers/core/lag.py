"""Lag per topic-partition against the high watermark, and the "caught up" state."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from typing import Any

from materializers.core import metrics
from materializers.core.changes import TopicPartition


class LagTracker:
    """Positions (next offset to process) and watermarks of the assigned partitions.

    ``caught_up`` is set the first time every assigned partition's position has reached the
    high watermark observed for it (an empty assignment never counts), and stays set: new
    writes after that show in :meth:`lag`, not in the event. It is cleared on reassignment.
    Thread-safe: :meth:`lag` may be called from any thread.
    """

    def __init__(self, name: str = "materializer"):
        self.name = name
        self.caught_up = threading.Event()
        self._lock = threading.Lock()
        self._position: dict[TopicPartition, int] = {}
        self._low: dict[TopicPartition, int] = {}
        self._high: dict[TopicPartition, int] = {}

    def assign(self, positions: dict[TopicPartition, int]) -> None:
        with self._lock:
            self._position.update(positions)
            self.caught_up.clear()
            metrics.CAUGHT_UP.labels(self.name).set(0)

    def revoke(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self._position.pop(tp, None)
                self._low.pop(tp, None)
                self._high.pop(tp, None)
                with contextlib.suppress(KeyError):
                    metrics.LAG.remove(self.name, tp[0], str(tp[1]))

    @property
    def partitions(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._position)

    def position(self, tp: TopicPartition) -> int | None:
        with self._lock:
            return self._position.get(tp)

    def advance(self, tp: TopicPartition, next_offset: int) -> None:
        with self._lock:
            if tp in self._position:
                self._position[tp] = next_offset
                self._export(tp)

    def observe(self, tp: TopicPartition, low: int, high: int) -> None:
        """Record a partition's watermarks (as queried from the broker)."""
        with self._lock:
            if tp in self._position and high >= 0:
                self._low[tp] = max(low, 0)
                self._high[tp] = high
                self._export(tp)

    def _lag(self, tp: TopicPartition) -> int | None:
        high = self._high.get(tp)
        if high is None:
            return None
        return max(0, high - max(self._position[tp], self._low.get(tp, 0)))

    def _export(self, tp: TopicPartition) -> None:
        lag = self._lag(tp)
        if lag is not None:
            metrics.LAG.labels(self.name, tp[0], str(tp[1])).set(lag)

    def lag(self) -> dict[TopicPartition, int | None]:
        """``(topic, partition) -> messages behind the high watermark`` for every assigned
        partition (None until its watermark was first observed)."""
        with self._lock:
            return {tp: self._lag(tp) for tp in self._position}

    def totals(self) -> tuple[int, int]:
        """(messages processed since offset 0 or the log start, messages up to the high
        watermarks) over the partitions with a known watermark: for a progress bar."""
        with self._lock:
            done = total = 0
            for tp, high in self._high.items():
                low = self._low.get(tp, 0)
                total += high - low
                done += max(0, min(self._position[tp], high) - low)
            return done, total

    def holds_nothing(self) -> None:
        """A group member the rebalance gave no partition (more instances than partitions):
        nothing to catch up until a rebalance gives it some (assign clears this)."""
        with self._lock:
            if self._position:
                return
        self.caught_up.set()
        metrics.CAUGHT_UP.labels(self.name).set(1)

    def check(self) -> bool:
        """Whether every assigned partition is at its observed high watermark; sets
        ``caught_up`` when so."""
        with self._lock:
            if not self._position:
                return False
            done = all(self._lag(tp) == 0 for tp in self._position)
        if done and not self.caught_up.is_set():
            self.caught_up.set()
            metrics.CAUGHT_UP.labels(self.name).set(1)
        return done


class ProgressBar:
    """A rebuild's progress on the terminal (rich), from a tracker's totals: shown while a
    view rebuilds from offset 0, gone once caught up."""

    def __init__(self, name: str, tracker: LagTracker):
        self.name = name
        self.tracker = tracker
        self._bar: Any = None

    def show(self) -> bool:
        """Update the bar; False once caught up (the bar closed)."""
        if self._bar is None:
            from rich.progress import Progress

            self._bar = Progress(transient=False)
            self._bar.start()
            self._task = self._bar.add_task(f"rebuilding {self.name}", total=None)
        done, total = self.tracker.totals()
        self._bar.update(self._task, completed=done, total=total or None)
        if self.tracker.caught_up.is_set():
            self.close()
            return False
        return True

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
