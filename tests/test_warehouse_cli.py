"""The warehouse checks its directory before Spark starts (issue 13, item 6): an unwritable
--path ends in one clear line within seconds, not a traceback after Spark's start. A table path
holding something else than bottler's Delta table (the user's files, a file, a log that cannot
be read) is refused in one line and left as it was (issue 25)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.support.cli import assert_clear_error, bottler
from tests.support.databases import execute
from tests.support.topics import topic_state


def test_an_unwritable_warehouse_directory_is_refused_before_spark_starts(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")  # a directory cannot be made under a file, not even by root
    started = time.monotonic()
    proc = bottler("materialize", "warehouse", "--path", str(blocker / "warehouse"), "--once",
                   "--broker", "127.0.0.1:1", timeout=120)
    elapsed = time.monotonic() - started
    assert_clear_error(proc, f"{blocker / 'warehouse'} is not writable", "--path")
    assert elapsed < 30, f"{elapsed:.0f} s: Spark was started first"
    assert not any(tmp_path.glob("**/.bottler-write-check-*"))


# -- the table paths (issue 25): what is not bottler's Delta table is refused, untouched ------

def snapshot_of(directory: Path) -> dict[str, bytes]:
    """Every file under ``directory`` and its content."""
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def load(stack, path: Path, prefix: str):
    return bottler("materialize", "warehouse", "--path", str(path), "--topic-prefix", prefix,
                   "--broker", stack.kafka, "--schema-registry", stack.registry_url, "--once",
                   timeout=300)


@pytest.fixture
def captured_items(stack, source, prefix, start):
    """A table `items` of 5 rows captured under the test's prefix."""
    execute(source, "create table items (id int primary key, name text)",
            "insert into items select g, 'item ' || g from generate_series(1, 5) g")
    capture = start()
    topic_state(stack, f"{prefix}.items", 5)
    capture.stop()
    return prefix


@pytest.mark.parametrize("case", ["foreign-files", "a-file", "corrupt-log"])
def test_a_table_path_that_is_not_a_bottler_table_is_refused_untouched(stack, captured_items,
                                                                       tmp_path, case):
    warehouse = tmp_path / "wh"
    table = warehouse / captured_items / "public" / "items"
    if case == "foreign-files":
        table.mkdir(parents=True)
        (table / "notes.csv").write_text("my,own,data\n")
        expected = ("holds files that are not a Delta table", "notes.csv")
    elif case == "a-file":
        table.parent.mkdir(parents=True)
        table.write_text("my own file\n")
        expected = ("is a file, not a Delta table directory",)
    else:
        first = load(stack, warehouse, captured_items)
        assert first.returncode == 0, first.stdout + first.stderr
        assert "Spark started" in first.stderr  # the line a refusal before Spark never shows
        log = sorted((table / "_delta_log").glob("*.json"))[0]
        log.write_bytes(b"\x00\xffnot json{")
        expected = ("cannot be read", "repair its _delta_log, or move the directory away")
    before = snapshot_of(table.parent)
    proc = load(stack, warehouse, captured_items)
    assert_clear_error(proc, str(table), *expected)
    assert "panicked" not in proc.stderr and "at org.apache" not in proc.stderr, proc.stderr
    assert "Spark started" not in proc.stderr  # refused before Spark's start (preflight.py)
    assert snapshot_of(table.parent) == before  # the user's files as they were, nothing added
