"""The replica in tests: a consumer loop into a PostgresSink, run until its target converges to
the source, and the rows of both to compare."""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager

import psycopg

from materializers.core import Materializer
from materializers.postgres import PostgresSink
from schemas.pgtypes import session_statements
from tests.support.waiting import wait_for


def fetch(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        for statement in session_statements():
            conn.execute(statement)
        return conn.execute(query).fetchall()


def same(source: str, target: str, query: str) -> bool:
    return repr(fetch(source, query)) == repr(fetch(target, query))  # NaN != NaN, reprs equal


def materializer(stack, sink, prefix, **options) -> Materializer:
    return Materializer(sink, bootstrap=stack.kafka, registry=stack.registry_url,
                        group_id=sink.group_id, prefix=prefix, batch_timeout=0.2,
                        progress=False, **options)


@contextmanager
def replica(stack, target, prefix, group=None, **options):
    """A PostgresSink fed by a Materializer running in a thread."""
    sink = PostgresSink(target, group or f"g-{uuid.uuid4().hex[:8]}")
    m = materializer(stack, sink, prefix, **options)
    stop = threading.Event()
    failure: list[BaseException] = []

    def run():
        try:
            m.run(stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield sink, m, failure
    finally:
        stop.set()
        thread.join(60)
        sink.close()
    assert not thread.is_alive()


def converge(source, target, queries, failure=(), timeout=60):
    def equal():
        if failure:
            raise failure[0]
        try:
            return all(same(source, target, q) for q in queries)
        except psycopg.errors.UndefinedTable:
            return False

    wait_for(equal, timeout, "the target to equal the source")
