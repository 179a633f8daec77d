"""The import graph has no cycle, between the top-level packages and between files.

Between packages: `common` is a leaf, `schemas` sits on it, `capture` and `materializers` on
those, and `bottler` (the command shell) on top. Between files: no module imports, even through
others, a module that imports it back. Every import counts, those inside functions (and under
TYPE_CHECKING) included: a cycle closed there still ties the files into one."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "schemas", "capture", "materializers", "compose", "bottler")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources() -> dict[str, Path]:
    """Every module of the packages, by dotted name."""
    return {module_name(path): path for package in PACKAGES
            for path in sorted((ROOT / package).rglob("*.py"))}


def imported(path: Path, name: str, modules: dict[str, Path]) -> Iterator[str]:
    """The modules ``path`` (module ``name``) imports, relative imports resolved: for
    ``from a import b``, ``a.b`` where it is a module, else ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                yield f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base


def file_edges() -> dict[str, set[str]]:
    """Module → the modules of the packages it imports, with the packages (``__init__``) that
    importing them runs first (but its own, which run before it anyway)."""
    modules = sources()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in imported(path, name, modules):
            parts = target.split(".")
            for end in range(1, len(parts) + 1):
                prefix = ".".join(parts[:end])
                implicit = end < len(parts) and name.startswith(prefix + ".")
                if prefix in modules and prefix != name and not implicit:
                    graph[name].add(prefix)
    return graph


def edges() -> dict[str, set[str]]:
    """Top-level package → the other top-level packages it imports."""
    graph: dict[str, set[str]] = {name: set() for name in PACKAGES}
    for module, targets in file_edges().items():
        top = module.split(".")[0]
        graph[top] |= {t.split(".")[0] for t in targets} - {top}
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

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_no_cycle_between_top_level_packages():
    found = cycle(edges())
    assert found is None, "import cycle between packages: " + " -> ".join(found)


def test_no_cycle_between_files():
    found = cycle(file_edges())
    assert found is None, "import cycle between files: " + " -> ".join(found)


def test_common_is_a_leaf_and_the_shell_is_on_top():
    graph = edges()
    assert graph["common"] == set()
    assert graph["schemas"] <= {"common"}
    assert "materializers" not in graph["capture"] and "capture" not in graph["materializers"]
    assert not any("bottler" in imported for imported in graph.values())


def test_file_graph_sees_imports_inside_functions_and_relative_ones():
    graph = file_edges()
    assert "capture.run" in graph["capture.cli"]  # imported inside a function
    # from .server
    assert "schemas.registry_server.server" in graph["schemas.registry_server.__main__"]
    assert "capture.health" in graph["capture.run"]  # the package's __init__ runs first


def test_cycle_finder_finds_a_cycle():
    assert cycle({"common": set(), "schemas": {"capture"}, "capture": {"schemas"},
                  "materializers": set(), "compose": set(), "bottler": set()}) is not None
