"""OpenSearch for the embedded stack's search API: one node on loopback, security off (OpenSearch
without its security plugin has none), run from the jars pinned in compose/jars/pom.xml by the
launcher compiled beside them (compose/jars/opensearch/). Its settings are those of a single
node on a small machine; docs/stack.md explains each one.

``BOTTLER_STACK_SEARCH_ENGINE=opensearch3`` runs OpenSearch 3 instead (it needs Java 21 or newer
in ``JAVA_HOME``): `make test-opensearch3` runs the search tests against it."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from common.errors import BottlerError
from compose import jars


@dataclass(frozen=True)
class Engine:
    profile: str  # of compose/jars/pom.xml
    java: int  # the oldest Java it runs on
    name: str
    major: int  # the version it answers with


ENGINES = {
    "opensearch": Engine("opensearch", 17, "OpenSearch", 2),
    "opensearch3": Engine("opensearch3", 21, "OpenSearch 3", 3),
}


def engine() -> Engine:
    """The engine ``BOTTLER_STACK_SEARCH_ENGINE`` names (OpenSearch 2 by default)."""
    chosen = os.environ.get("BOTTLER_STACK_SEARCH_ENGINE") or "opensearch"
    if chosen not in ENGINES:
        raise BottlerError(f"BOTTLER_STACK_SEARCH_ENGINE={chosen} is no engine the stack runs",
                           f"choose among {', '.join(ENGINES)}, or unset it")
    return ENGINES[chosen]


LAUNCHER = "BottlerSearchEngine"  # compose/jars/opensearch/BottlerSearchEngine.java
HEAP = "512m"  # a 2-core machine; the tests' indices are small, the bench's a million documents
JVM_OPTIONS = [
    f"-Xms{HEAP}", f"-Xmx{HEAP}", "-XX:+UseG1GC", "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true", "-Dfile.encoding=UTF-8", "-Dlog4j2.disable.jmx=true",
    "-Dlog4j.shutdownHookEnabled=false", "-Dio.netty.allocator.numDirectArenas=0",
    "-Djava.locale.providers=SPI,COMPAT",  # as OpenSearch's own jvm.options: its date formats
]

SETTINGS = {
    "cluster.name": "bottler",
    # one node that elects itself, and nothing waits for others
    "discovery.type": "single-node",
    "network.host": "127.0.0.1",
    # a busy shared disk must not turn the stack's indices read-only
    "cluster.routing.allocation.disk.threshold_enabled": "false",
    "bootstrap.memory_lock": "false",
}


class SearchEngineNode:
    """The node's files under ``<stack>/search-engine`` (``search-engine-opensearch3`` for that
    engine): its settings (config/opensearch.yml) and data (node_1/). ``transport_port`` is
    the node-to-node port, bound on loopback too. Its ``name`` is its home's: readiness asks
    the port for it, so that another stack's node, started on the same free port in the moment
    between its choice and this node's bind, is not taken for this one."""

    def __init__(self, stack: Path, port: int, transport_port: int | None = None,
                 settings: dict[str, str] | None = None):
        # another engine keeps its data apart: OpenSearch 2 cannot read indices of 3
        chosen = os.environ.get("BOTTLER_STACK_SEARCH_ENGINE") or "opensearch"
        self.home = stack / ("search-engine" if chosen == "opensearch" else
                             f"search-engine-{chosen}")
        self.port = port
        self.transport_port = transport_port
        self.extra = settings or {}
        digest = hashlib.sha256(str(self.home.resolve()).encode()).hexdigest()[:12]
        self.name = f"bottler-{digest}"

    @property
    def config(self) -> Path:
        return self.home / "config" / "opensearch.yml"

    def settings(self) -> dict[str, str]:
        return {
            **SETTINGS,
            "node.name": self.name,
            "http.port": str(self.port),
            # a free one in the range unless given: several stacks run side by side in tests
            "transport.port": str(self.transport_port or "9300-9400"),
            **self.extra,
        }

    def argv(self, java: str, classpath: str) -> list[str]:
        return [java, *JVM_OPTIONS, *jars.extra_jvm_options(), "-cp", classpath, LAUNCHER,
                str(self.home)]

    def check(self) -> tuple[str, str]:
        """Refuse what would keep the node from starting, before anything of the stack starts:
        no Java new enough, no jars (fetched and the launcher compiled here if missing).
        Returns the java binary and the classpath."""
        chosen = engine()
        return jars.java(chosen.java, chosen.name), jars.classpath(chosen.profile)

    def prepare(self) -> list[str]:
        """Write the node's settings and return the command that runs it."""
        java, classpath = self.check()
        self.config.parent.mkdir(parents=True, exist_ok=True)
        self.config.write_text(
            "".join(f"{key}: {_yaml(value)}\n" for key, value in self.settings().items()))
        return self.argv(java, classpath)


def _yaml(value: str) -> str:
    """A YAML scalar that stays a string (``9300-9400``, ``false``) as OpenSearch parses it."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def missing_jar(output: str) -> BottlerError | None:
    """A missing jar of OpenSearch's classpath, in one line (compose/jars.py)."""
    chosen = engine()
    return jars.missing_jar(output, chosen.profile, chosen.name)
