"""The warehouse checks its directory before Spark starts (issue 13, item 6): an unwritable
--path ends in one clear line within seconds, not a traceback after Spark's start."""

from __future__ import annotations

import time

from tests.test_capture_errors import assert_clear_error, bottler


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
