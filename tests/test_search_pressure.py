"""The search view under a real engine's bulk pressure (issue 28): a node of the test's own whose
write thread pool has one thread and a queue of one, writers hammering it with bulks, and a
rebuild of an index from a table topic beside them. The engine answers 429; the view backs off
and loses nothing.

The node is the test's own because a write queue cannot be resized on a running node:
``thread_pool.write.queue_size`` is a static setting, and ``PUT _cluster/settings`` refuses it
(OpenSearch 2.19 takes ``cluster.thread_pool.write.size`` alone, and a queue of 10,000 rejects
nothing a test can send)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from materializers.search.client import SearchClient, SearchError
from materializers.search.reader import ReaderOptions
from materializers.search.reindex import reindex
from tests.support import search_api as api
from tests.support.databases import execute, rows
from tests.support.search_node import own_search_engine
from tests.support.waiting import wait_for, wait_streaming

PRESSURE = {"thread_pool.write.size": "1", "thread_pool.write.queue_size": "1"}
ROWS = 3000
BATCH = 100  # documents per bulk of the view: 30 bulks, each followed by its offsets
# the view's refused answers after which the hammers stop: never the nine in a row that would
# use up the retries of one of its requests
PUSHBACK = 3


class Hammer(threading.Thread):
    """Sends bulks of 200 documents to an index of its own, back to back, until stopped or
    ``enough()``; counts the answers that refused them (a whole 429, or items refused with
    429)."""

    BODY = b"".join(b'{"index":{}}\n{"n":%d}\n' % i for i in range(200))

    def __init__(self, url: str, enough: Callable[[], bool]):
        super().__init__(daemon=True)
        self.enough = enough
        self.client = SearchClient(url, retries=0)
        self.stop = threading.Event()
        self.bulks = self.refused = 0

    def run(self):
        while not self.stop.is_set() and not self.enough():
            try:
                answer = self.client.request("POST", "/hammer/_bulk", self.BODY, ndjson=True,
                                             params={"filter_path": "status,items.*.status"},
                                             ok=(429,))
            except SearchError:  # a 503 or a timeout on the busy node: hammer on
                continue
            self.bulks += 1
            self.refused += answer.get("status") == 429 or any(
                status == 429 for item in answer.get("items", []) for status in
                (result["status"] for result in item.values()))


def test_the_engines_429s_are_retried_and_the_rebuild_loses_nothing(stack, source, prefix,
                                                                    start, tmp_path):
    with own_search_engine(tmp_path, PRESSURE) as node:
        execute(source, "create table items (id int primary key, name text not null)",
                f"insert into items select g, 'item ' || g from generate_series(1, {ROWS}) g")
        start()
        wait_streaming(source, prefix)  # the table's rows are in its topic
        view = SearchClient(node.wait_ready())
        view.request("PUT", "/hammer")  # the hammers' index, there before they start
        hammers = [Hammer(node.url, lambda: view.refused[429] >= PUSHBACK) for _ in range(2)]
        for hammer in hammers:
            hammer.start()
        try:  # the node is busy writing before the rebuild starts
            wait_for(lambda: all(h.bulks for h in hammers), 60, "the hammers' first bulks")
            done = reindex(view, "items", ReaderOptions(
                bootstrap=stack.kafka, registry=stack.registry_url, prefix=prefix,
                progress=False, batch_size=BATCH, loop_options={"batch_timeout": 0.2}),
                max_lag=0, handover_timeout=0)
        finally:
            for hammer in hammers:
                hammer.stop.set()
                hammer.join(60)
        print(f"the view was refused {view.refused[429]} times with 429 (requests or items);"
              f" the hammers {sum(h.refused for h in hammers)} of"
              f" {sum(h.bulks for h in hammers)} bulks")
        assert view.refused[429] > 0  # the engine pushed back on the view itself
        assert done.documents == ROWS
        indexed = {h["_source"]["id"]: h["_source"]["name"]
                   for h in api.hits(view, "items", size=ROWS + 1)}
        assert indexed == dict(rows(source, "select id, name from items"))
