"""The import graph between the top-level packages has no cycle: `common` is a leaf, `schemas`
sits on it, `capture` and `materializers` on those, and `bottler` (the command shell) on top.
Every import counts, those inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "schemas", "capture", "materializers", "compose", "bottler")


def edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in PACKAGES}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top in PACKAGES and top != package:
                        graph[package].add(top)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path, or None."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return path[path.index(nxt):] + [nxt] if nxt in path else path + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = "done"
        return None

    for start in PACKAGES:
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_cycle_between_top_level_packages():
    found = cycle(edges())
    assert found is None, "import cycle between packages: " + " -> ".join(found)


def test_common_is_a_leaf_and_the_shell_is_on_top():
    graph = edges()
    assert graph["common"] == set()
    assert graph["schemas"] <= {"common"}
    assert "materializers" not in graph["capture"] and "capture" not in graph["materializers"]
    assert not any("bottler" in imported for imported in graph.values())


def test_cycle_finder_finds_a_cycle():
    assert cycle({"common": set(), "schemas": {"capture"}, "capture": {"schemas"},
                  "materializers": set(), "compose": set(), "bottler": set()}) is not None
