"""The test suite as a codebase: each fixture defined once, and no test module a library of
another (what tests share is in tests/support)."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# a test module as an import names it (tests.test_x, tests.faults.test_y, tests.conftest), or
# as a "module:attribute" string does (a translator a child process loads)
TEST_MODULE = re.compile(r"^tests(\.\w+)*\.(test_\w+|conftest)$")
TEST_MODULE_BY_NAME = re.compile(r"^tests(\.\w+)*\.(test_\w+|conftest):\w+$")


def sources() -> dict[str, ast.Module]:
    return {str(path.relative_to(TESTS)): ast.parse(path.read_text(), str(path))
            for path in sorted(TESTS.rglob("*.py")) if "bench" not in path.parts}


def is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return ast.unparse(target).split(".")[-1] == "fixture"


def fixtures_defined_twice(trees: dict[str, ast.Module]) -> dict[str, list[str]]:
    defined: dict[str, list[str]] = defaultdict(list)
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                    is_fixture(d) for d in node.decorator_list):
                defined[node.name].append(f"{name}:{node.lineno}")
    return {fixture: where for fixture, where in defined.items() if len(where) > 1}


def imported_test_modules(tree: ast.Module) -> list[str]:
    """The test modules (or conftest) that ``tree`` imports or names to be loaded."""
    used = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            used.append(f"line {node.lineno}: a relative import")
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            used += [f"line {node.lineno}: {n}" for n in names if TEST_MODULE.match(n)]
        elif isinstance(node, ast.Import):
            used += [f"line {node.lineno}: {a.name}" for a in node.names
                     if TEST_MODULE.match(a.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                TEST_MODULE_BY_NAME.match(node.value)):
            used.append(f"line {node.lineno}: {node.value}")
    return used


def test_every_fixture_is_defined_once():
    twice = fixtures_defined_twice(sources())
    assert not twice, f"fixtures defined more than once (define it in tests/support): {twice}"


def test_no_test_module_imports_another():
    used = {name: found for name, tree in sources().items()
            if (found := imported_test_modules(tree))}
    assert not used, f"test modules used as libraries (move what they share to tests/support): " \
                     f"{used}"


def test_the_checks_see_what_they_look_for():
    one = ast.parse("import pytest\n@pytest.fixture\ndef a(): pass\n")
    two = ast.parse("import pytest\n@pytest.fixture(scope='module')\ndef a(): pass\n")
    assert fixtures_defined_twice({"one.py": one, "two.py": two}) == {
        "a": ["one.py:3", "two.py:3"]}
    module = "tests." + "test_x"  # spelt apart, or this module would be caught
    used = imported_test_modules(ast.parse(
        f"from {module} import helper\nimport tests.conftest\nfrom tests.faults import test_faults"
        f"\nfrom .support import cli\nload('{module}:translator')\n"
        "from tests.support.cli import bottler\n"))
    assert used == [f"line 1: {module}", "line 2: tests.conftest",
                    "line 3: tests.faults.test_faults", "line 4: a relative import",
                    f"line 5: {module}:translator"]


# Longer than the codebase's limits (450 lines a module, 80 a function), each for its reason:
# table-driven modules whose cases are the bulk, and end-to-end stories told in one test.
LONG_MODULES = {
    "test_avro_writer.py": "the writer against fastavro, case by case",
    "test_pgoutput.py": "every pgoutput message, decoded case by case",
    "test_capture_errors.py": "every start-up mistake, each its one line",
    "test_types_roundtrip.py": "every PostgreSQL type, value by value",
    "test_pgtypes.py": "every PostgreSQL type's Avro mapping, case by case",
    "test_compose_file.py": "each service of the compose file checked in turn",
}
LONG_TESTS = {  # one story each: splitting it would lose what it proves (one run, end to end)
    "test_incremental_snapshot_under_writes_survives_kill_9",
    "test_three_captures_on_one_broker_each_view_reads_only_its_own",
    "test_protocol_v1_stream_decodes_exactly",
    "test_retire_removes_one_capture_and_nothing_else",
    "test_two_instances_of_each_view_share_the_partitions_and_survive_a_kill_and_a_truncate",
}


def test_modules_and_functions_are_short_but_for_the_listed():
    long_modules, long_functions = [], []
    for name, tree in sources().items():
        lines = len((TESTS / name).read_text().splitlines())
        if lines > 450 and name not in LONG_MODULES:
            long_modules.append(f"{name}: {lines} lines")
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
                if node.end_lineno - first >= 80 and node.name not in LONG_TESTS:
                    long_functions.append(f"{name}:{node.lineno} {node.name}")
    assert not long_modules and not long_functions, (long_modules, long_functions)
