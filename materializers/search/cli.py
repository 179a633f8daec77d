"""`bottler materialize search` and `bottler reindex` (registered by bottler/cli.py)."""

from __future__ import annotations

from bottler.errors import BottlerError


def materialize_search() -> None:
    """Keep a search index current from the table topics."""
    raise BottlerError("not built yet")


def reindex() -> None:
    """Rebuild a search index from offset zero and swap its alias."""
    raise BottlerError("not built yet")
