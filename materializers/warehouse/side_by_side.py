"""The table topics of one spark-route batch committed side by side (native.py): each topic's
decode and MERGE in a thread of its own, so that the Spark jobs of different tables overlap
(a MERGE is a dozen small ones: one table's planning and Delta log work runs while another's
tasks do).

**A session per running topic.** delta-spark takes a MERGE's transaction identifier
(``txnAppId``/``txnVersion``) from its session's SQL configuration, so two MERGEs at once in
one session would record each other's offsets. A topic takes a session no other running topic
holds: the job's own, or a clone of it (its settings: Delta's housekeeping, schema evolution;
the same SparkContext and cache), made when none is free and kept for later batches.

**A failure.** The batch fails with its first failed topic's error (in topic order) once every
topic has ended, so its offsets are not stored and no commit is under way when it is told.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar

T = TypeVar("T")


class SideBySide:
    """Runs a batch's per-topic tasks on up to ``threads`` threads, each task given a session
    of its own while it runs; one thread (or one task) runs in the caller's, on ``spark``."""

    def __init__(self, spark: Any, threads: int):
        self.spark, self.threads = spark, max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        self._free: queue.SimpleQueue = queue.SimpleQueue()  # sessions no task holds
        self._free.put(spark)

    def run(self, tasks: list[Callable[[Any], T]]) -> list[T]:
        """Each task's result, in the tasks' order; the first failure raised after all end."""
        if self.threads == 1 or len(tasks) <= 1:
            return [task(self.spark) for task in tasks]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="warehouse-topic")
        futures = [self._pool.submit(self._in_session, task) for task in tasks]
        wait(futures)
        return [f.result() for f in futures]  # the first failure raises here

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _in_session(self, task: Callable[[Any], T]) -> T:
        try:
            session = self._free.get_nowait()
        except queue.Empty:
            session = clone(self.spark)
        try:  # the JVM thread's active session: what Spark takes where none is given
            session._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)
            return task(session)
        finally:
            self._free.put(session)


def clone(spark: Any) -> Any:
    """A session sharing ``spark``'s SparkContext, with a copy of its SQL configuration."""
    from pyspark.sql import SparkSession

    return SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())
