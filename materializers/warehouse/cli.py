"""`bottler materialize warehouse` and `bottler warehouse optimize|vacuum` (registered by
bottler/cli.py)."""

from __future__ import annotations

import typer

from bottler.errors import BottlerError

warehouse_app = typer.Typer(no_args_is_help=True, help="Maintain the Delta warehouse tables.")


def materialize_warehouse() -> None:
    """Merge the table topics into Delta Lake tables with PySpark."""
    raise BottlerError("not built yet")
