"""List options read the same in every command: repeated flags, `a,b`, or a YAML list."""

import pytest

from bottler.migrate.cli import CutoverSettings
from capture.settings import CaptureSettings
from common.config import comma_separated


@pytest.mark.parametrize("given, expected", [
    ("a,b", ["a", "b"]),
    (["a, b", "c"], ["a", "b", "c"]),
    (("a",), ["a"]),
    (" , ", []),
    (None, []),
])
def test_comma_separated(given, expected):
    assert comma_separated(given) == expected


def test_capture_tables_and_cutover_roles_share_the_rule():
    capture = CaptureSettings(postgres="postgresql://x/db", tables=["public.a,b", "c"])
    assert capture.tables == ["public.a", "b", "c"]
    cutover = CutoverSettings(source="postgresql://x/s", target="postgresql://x/t",
                              broker="localhost:9092", fence_roles="app, batch")
    assert cutover.fence_roles == ["app", "batch"]
