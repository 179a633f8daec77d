"""The Spark sessions of the tests: one JVM for the whole test session, not one per module (its
start takes tens of seconds on a busy machine).

A process holds one Spark session at a time, and a session's jars and SQL extensions are fixed
when its JVM starts: ``spark`` is the warehouse's Python route (``spark_session()``),
``spark_native`` the Spark route with its jars (``route="spark"``). A module asking for the
other route than the one running stops that one first (jvm.stop: until its JVM has exited).
The spark route's session also serves Spark Connect on a free loopback port (connect.py,
``SparkSessions.remote``): the tests' ``--spark-remote`` processes run in it, no JVM of their
own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


class SparkSessions:
    """The running session and its route; the other route's replaces it when asked for."""

    def __init__(self) -> None:
        self.route: str | None = None
        self.session: Any = None
        self.remote: str | None = None  # the spark route's Spark Connect address

    def get(self, route: str) -> Any:
        if self.route != route:
            self.stop()
            from compose.procs import free_port
            from materializers.warehouse import connect
            from materializers.warehouse.job import spark_session

            conf = None
            if route == "spark":
                port = free_port()
                conf = connect.server_conf("127.0.0.1", port, "local[2]")
                self.remote = f"sc://127.0.0.1:{port}"
            self.session = spark_session("local[2]", route=route, conf=conf)
            self.route = route
        return self.session

    def stop(self) -> None:
        if self.session is not None:
            from materializers.warehouse import jvm

            session, self.session, self.route, self.remote = self.session, None, None, None
            jvm.stop(session)


@pytest.fixture(scope="session")
def spark_sessions() -> Iterator[SparkSessions]:
    sessions = SparkSessions()
    try:
        yield sessions
    finally:
        sessions.stop()


@pytest.fixture(scope="module")
def spark(spark_sessions):
    """The warehouse's Spark session (the Python route)."""
    return spark_sessions.get("python")


@pytest.fixture(scope="module")
def spark_native(spark_sessions):
    """The Spark route's session: Spark's Kafka source, spark-avro and delta-spark."""
    return spark_sessions.get("spark")

