"""Readers: a consumer loop feeding one physical index, and the live reader, which keeps the
index behind an alias current and follows the alias when a reindex moves it.

The hand-over: ``bottler reindex`` builds ``NAME-<n+1>`` with its own reader, stops that reader
(its offsets are stored with the new index) and swaps the alias. The live reader checks the
alias every ``check_interval`` seconds; when it points elsewhere, the live reader finishes its
batch, marks the old index released (its offsets document says so: the reindex waits for this
before deleting the old index) and starts reading into the new index from the offsets the
rebuild left there. So at any time one reader writes to an index.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from common.kafka import Connection
from common.registry_client import Registry
from materializers.core import Materializer
from materializers.search import indices
from materializers.search.client import SearchClient, SearchError
from materializers.search.documents import Transform
from materializers.search.sink import SearchSink

log = logging.getLogger(__name__)


@dataclass
class ReaderOptions:
    """What every reader of an alias is given: where to read, how to shape documents."""

    bootstrap: Connection  # the servers, or every Kafka client property
    registry: Registry  # the URL, or every registry client property
    prefix: str = ""
    topics: list[str] | None = None
    on_poison: str = "dead-letter"
    batch_size: int = 5000
    definition: dict[str, Any] = field(default_factory=dict)  # the mapping file
    transform: Transform | None = None
    progress: bool | None = None
    loop_options: dict[str, Any] = field(default_factory=dict)  # more Materializer arguments

    def reader(self, client: SearchClient, index: str, alias: str | None
               ) -> tuple[SearchSink, Materializer]:
        """A sink on the physical index ``index`` and a consumer loop feeding it, with the
        index's own consumer group (``bottler-search-<index>``)."""
        sink = SearchSink(client, index, alias=alias, definition=self.definition,
                          transform=self.transform)
        loop = Materializer(
            sink, bootstrap=self.bootstrap, registry=self.registry, group_id=sink.group_id,
            topics=self.topics, prefix=self.prefix, on_poison=self.on_poison,  # type: ignore[arg-type]
            batch_size=self.batch_size, progress=self.progress, **self.loop_options,
        )
        return sink, loop


class LiveReader:
    """Keeps the physical index behind ``alias`` current (creating ``alias-1`` and the alias if
    there is none) until ``run``'s stop event is set; follows the alias to a newer index."""

    def __init__(self, client: SearchClient, alias: str, options: ReaderOptions,
                 check_interval: float = 1.0):
        self.client = client
        self.alias = alias
        self.options = options
        self.check_interval = check_interval
        self.index: str | None = None  # the physical index being written
        self.loop: Materializer | None = None
        self.switches = 0  # hand-overs to a newer index
        self.ready = threading.Event()  # set once the first reader runs

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            index = indices.ensure_alias(self.client, self.alias, self.options.definition)
            if self.index is not None and index != self.index:
                self.switches += 1
                log.info("%s: following the alias from %s to %s", self.alias, self.index, index)
            sink, loop = self.options.reader(self.client, index, self.alias)
            self.index, self.loop = index, loop
            halt = threading.Event()
            watcher = threading.Thread(target=self._watch, args=(index, stop, halt),
                                       name=f"alias-{self.alias}", daemon=True)
            watcher.start()
            self.ready.set()
            try:
                loop.run(halt)
            finally:
                halt.set()
                watcher.join()
                if not stop.is_set():  # the alias moved: this reader is done with the index
                    sink.release()
                sink.close()

    def run_until_caught_up(self, timeout: float | None = None) -> None:
        """Catch the alias's index up once, then return."""
        index = indices.ensure_alias(self.client, self.alias, self.options.definition)
        sink, loop = self.options.reader(self.client, index, self.alias)
        self.index, self.loop = index, loop
        try:
            loop.run_until_caught_up(timeout)
        finally:
            sink.close()

    def _watch(self, index: str, stop: threading.Event, halt: threading.Event) -> None:
        while not halt.wait(self.check_interval):
            if stop.is_set():
                halt.set()
                return
            try:
                target = indices.alias_target(self.client, self.alias)
            except SearchError as exc:
                log.warning("%s: cannot read the alias: %s", self.alias, exc)
                continue
            if target != index:
                log.info("%s: the alias moved from %s to %s", self.alias, index, target)
                halt.set()
                return
