"""The table topics of one spark-route batch committed side by side (native.py): each topic's
decode and MERGE in a thread of its own, so that the small Spark jobs of different tables
overlap. A MERGE is a dozen Spark jobs bound by latency (scheduling, planning, Delta's log),
not by the cores: one table's planning runs while another's tasks do.

**A session per thread.** delta-spark takes a MERGE's transaction identifier
(``txnAppId``/``txnVersion``) from its session's SQL configuration, so two MERGEs in one
session would record each other's offsets. Each thread has a clone of the job's session (its
settings: Delta's housekeeping, schema evolution; the same SparkContext and cache), made at its
first topic and kept, and is the JVM thread's active session.

**A failure.** The batch fails with its first failed topic's error (in topic order) once every
topic has ended, so its offsets are not stored and no commit is under way when it is told.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, TypeVar

T = TypeVar("T")


class SideBySide:
    """Runs a batch's per-topic tasks on up to ``threads`` threads, each task given its
    thread's session; one thread (or one task) runs in the caller's, on ``spark``."""

    def __init__(self, spark: Any, threads: int):
        self.spark, self.threads = spark, max(1, threads)
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()

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
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = clone(self.spark)
        return task(session)


def clone(spark: Any) -> Any:
    """A session sharing ``spark``'s SparkContext, with a copy of its SQL configuration, made
    the calling thread's active session in the JVM."""
    from pyspark.sql import SparkSession

    session = SparkSession(spark.sparkContext, spark._jsparkSession.cloneSession())
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(session._jsparkSession)
    return session
