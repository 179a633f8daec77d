"""`bottler translate NAME` (registered by bottler/cli.py)."""

from __future__ import annotations

from bottler.errors import BottlerError


def translate() -> None:
    """Run a business-event translator."""
    raise BottlerError("not built yet")
