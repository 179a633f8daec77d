"""A search engine node of a test's own (compose/search_engine.py), for a test that needs one
configured apart: one whose static settings (thread pools, say) the session's node must not
have, as they cannot be changed on a running node."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compose.procs import free_port
from compose.search_engine import SearchEngineNode
from compose.services import search_ready
from tests.support.waiting import stop_gracefully, wait_for


class OwnSearchEngine:
    """One node under ``home`` with ``settings`` added to the stack's; its output goes to
    ``home/search-engine.log``."""

    def __init__(self, home: Path, settings: dict[str, str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home / "search-engine.log"
        self.node = SearchEngineNode(home, self.port, settings=settings)
        argv = self.node.prepare()
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def wait_ready(self) -> str:
        """Its URL, once it answers (a JVM takes a while: a test may do its setup meanwhile)."""
        answers = search_ready(self.port, self.node.name)

        def ready() -> bool:
            assert self.process.poll() is None, self.log.read_text()[-3000:]
            return answers()

        wait_for(ready, 180, f"the test's search engine on port {self.port}")
        return self.url

    def stop(self) -> None:
        """A graceful stop (the node closes its indices), a kill if it takes over a minute."""
        stop_gracefully(self.process)


@contextmanager
def own_search_engine(home: Path, settings: dict[str, str]) -> Iterator[OwnSearchEngine]:
    """The node, starting, for the ``with`` block (``wait_ready`` before using it); stopped at
    the end."""
    node = OwnSearchEngine(home, settings)
    try:
        yield node
    finally:
        node.stop()
