"""`bottler status` (registered by bottler/cli.py)."""

from __future__ import annotations

from bottler.errors import BottlerError


def status() -> None:
    """One live view of the slot, the topics and every materializer's lag and state."""
    raise BottlerError("not built yet")
