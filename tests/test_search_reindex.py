"""The search reindexer end to end: a capture of a live source, the live reader on an alias, and
a reindex run while writes continue and a reader queries the alias the whole time."""

from __future__ import annotations

import random
import threading
import time
import uuid
from contextlib import contextmanager
from decimal import Decimal

import pytest

from common.errors import BottlerError
from materializers.search import indices
from materializers.search.client import SearchClient
from materializers.search.reader import LiveReader, ReaderOptions
from materializers.search.reindex import reindex, status
from tests.support import search_api as api
from tests.support.databases import execute, rows
from tests.support.waiting import in_thread, wait_for, wait_streaming

SHOP = """
create table products (id int primary key, name text not null, price numeric(10,2),
                       stock int, updated timestamptz default now());
insert into products (id, name, price, stock)
  select g, 'product ' || g, g * 1.25, g % 7 from generate_series(1, 300) g;
"""


@pytest.fixture
def alias(client):
    """The alias of the test's index; its versions are deleted at the end."""
    alias = f"shop-{uuid.uuid4().hex[:8]}"
    yield alias
    for name in indices.versions(client, alias):
        indices.delete_index(client, name)


def options(stack, prefix, **more) -> ReaderOptions:
    return ReaderOptions(bootstrap=stack.kafka, registry=stack.registry_url, prefix=prefix,
                         progress=False, loop_options={"batch_timeout": 0.2}, **more)


@contextmanager
def live(client, alias, opts):
    """A LiveReader on ``alias`` running in a thread."""
    reader = LiveReader(client, alias, opts, check_interval=0.3)
    with in_thread(reader.run) as failure:
        yield reader, failure


def served(es: SearchClient, alias: str) -> dict[int, tuple]:
    """{id: (name, price, stock)} of every product document the alias serves."""
    if not api.aliased(es, alias):
        return {}
    hits = api.hits(es, alias, size=10_000)
    return {h["_source"]["id"]: (h["_source"]["name"], Decimal(repr(h["_source"]["price"])),
                                 h["_source"]["stock"]) for h in hits}


def source_rows(dsn) -> dict[int, tuple]:
    return {i: (n, p, s) for i, n, p, s in rows(dsn, "select id, name, price, stock from products")}


def converge(es, alias, dsn, failure, timeout=60):
    def equal():
        if failure:
            raise failure[0]
        return served(es, alias) == source_rows(dsn)

    wait_for(equal, timeout, f"{alias} to equal the source table")


class Writer(threading.Thread):
    """Inserts, updates and deletes products until stopped."""

    def __init__(self, dsn):
        super().__init__(daemon=True)
        self.dsn = dsn
        self.stop = threading.Event()
        self.statements = 0
        self.error: BaseException | None = None

    def run(self):
        import psycopg

        rng = random.Random(7)
        next_id = 1000
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    kind = rng.random()
                    if kind < 0.4:
                        conn.execute("insert into products (id, name, price, stock) values "
                                     "(%s, %s, %s, 1)", (next_id, f"new {next_id}",
                                                         Decimal(next_id) / 100))
                        next_id += 1
                    elif kind < 0.9:
                        conn.execute("update products set stock = stock + 1, name = name || '+'"
                                     " where id = %s", (rng.randint(1, 300),))
                    else:
                        conn.execute("delete from products where id = %s",
                                     (rng.randint(1, 300),))
                    self.statements += 1
                    time.sleep(0.01)
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            self.error = exc


class Searcher(threading.Thread):
    """Queries the alias until stopped; every answer and error is kept."""

    def __init__(self, url, alias):
        super().__init__(daemon=True)
        self.es = SearchClient(url, retries=3)
        self.alias = alias
        self.stop = threading.Event()
        self.answers: list[tuple[float, int]] = []  # (time, hits)
        self.errors: list[BaseException] = []

    def run(self):
        while not self.stop.is_set():
            try:
                answer = self.es.request("POST", f"/{self.alias}/_search", {
                    "query": {"match": {"name": "product"}}, "size": 0,
                    "track_total_hits": True})
                self.answers.append((time.monotonic(), answer["hits"]["total"]["value"]))
            except Exception as exc:  # noqa: BLE001 - counted by the test
                self.errors.append(exc)
            time.sleep(0.02)


def test_reindex_while_writes_continue_and_the_alias_is_queried(stack, source, prefix, start,
                                                                alias, client):
    execute(source, SHOP)
    start()
    wait_streaming(source, prefix)
    es = SearchClient(stack.search_url)
    opts = options(stack, prefix)
    with live(client, alias, opts) as (reader, failure):
        converge(es, alias, source, failure)
        first = reader.index
        assert first == f"{alias}-1"
        writer, searcher = Writer(source), Searcher(stack.search_url, alias)
        writer.start()
        searcher.start()
        try:
            time.sleep(1)
            done = reindex(client, alias, options(stack, prefix), max_lag=20, retention=0.5,
                           handover_timeout=20, timeout=120)
            time.sleep(1)  # writes go on after the swap
        finally:
            writer.stop.set()
            writer.join(10)
            searcher.stop.set()
            searcher.join(10)
        assert writer.error is None and writer.statements > 50
        assert (done.old, done.new) == (first, f"{alias}-2")
        assert done.released and done.deleted
        assert indices.alias_target(client, alias) == done.new
        assert not client.exists(first), "the old index is gone after retention"
        assert indices.OffsetStore(client).get(first) is None
        wait_for(lambda: reader.index == done.new, 10, "the live reader to follow the alias")
        assert reader.switches == 1
        converge(es, alias, source, failure)  # nothing missing, nothing stale
    assert not searcher.errors, searcher.errors[:3]
    assert len(searcher.answers) > 20 and all(hits > 0 for _, hits in searcher.answers)
    [row] = status(client, alias, stack.kafka)
    assert (row.index, row.serving, row.lag) == (done.new, True, 0)


def test_a_rebuild_without_a_live_reader_creates_the_alias_and_a_later_reader_continues(
        stack, source, prefix, start, alias, client):
    execute(source, SHOP)
    start()
    wait_streaming(source, prefix)
    es = SearchClient(stack.search_url)
    first = reindex(client, alias, options(stack, prefix), max_lag=0, handover_timeout=1)
    assert (first.old, first.new, first.documents) == (None, f"{alias}-1", 300)
    execute(source, "update products set name = 'renamed' where id = 1",
            "delete from products where id = 2")
    second = reindex(client, alias, options(stack, prefix), max_lag=0, handover_timeout=1,
                     keep_old=True)
    assert (second.old, second.new, second.released, second.deleted) == (
        first.new, f"{alias}-2", False, False)
    assert client.exists(first.new)
    with live(client, alias, options(stack, prefix)) as (reader, failure):
        execute(source, "insert into products (id, name, price, stock) values (5000, 'late', 1, 1)")
        converge(es, alias, source, failure)
        assert reader.index == second.new and reader.switches == 0
    states = {row.index: row for row in status(client, alias, stack.kafka)}
    assert states[first.new].serving is False and states[second.new].serving is True
    assert states[second.new].lag == 0 and states[first.new].lag > 0


def test_a_rebuild_stopped_before_the_swap_deletes_its_unfinished_index(
        stack, source, prefix, start, alias, client):
    execute(source, SHOP)
    start()
    wait_streaming(source, prefix)
    first = reindex(client, alias, options(stack, prefix), max_lag=0, handover_timeout=0)
    stopped = threading.Event()
    stopped.set()  # as SIGTERM sets it, here before the rebuild could catch up
    with pytest.raises(BottlerError, match="stopped before the swap"):
        reindex(client, alias, options(stack, prefix), max_lag=0, abandon=stopped)
    assert not client.exists(f"{alias}-2")
    assert indices.alias_target(client, alias) == first.new
    assert list(indices.versions(client, alias)) == [first.new]
