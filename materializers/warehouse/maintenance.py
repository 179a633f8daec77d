"""Maintenance of the warehouse's Delta tables: compaction (``optimize``) and removal of the
files no table version within the retention needs (``vacuum``). Both keep the tables' recorded
offsets: transaction identifiers live in the table state, not in the data files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from common.errors import BottlerError
from materializers.warehouse.delta import open_table
from materializers.warehouse.sink import OFFSETS_TABLE, delta_tables


def tables(root: Path, only: list[str] | None = None) -> Iterator[tuple[str, Path]]:
    """``(schema.table, path)`` of the warehouse's tables (``only``: those named)."""
    found = {f"{p.parent.name}.{p.name}": p for p in delta_tables(root)}
    if (root / OFFSETS_TABLE / "_delta_log").is_dir():
        found[OFFSETS_TABLE] = root / OFFSETS_TABLE
    if only:
        missing = [name for name in only if name not in found]
        if missing:
            raise BottlerError(f"no Delta table {', '.join(missing)} under {root}",
                               f"tables there: {', '.join(sorted(found)) or 'none'}")
        found = {name: found[name] for name in only}
    yield from sorted(found.items())


def optimize(path: Path, target_size: int | None = None) -> dict:
    """Compact the table's small files into larger ones; the metrics delta-rs reports."""
    table = open_table(path)
    return table.optimize.compact(target_size=target_size)


def vacuum(path: Path, retention_hours: int | None, dry_run: bool,
           full: bool = False) -> list[str]:
    """Delete (or, ``dry_run``, list) the files no version within ``retention_hours`` uses
    (None: the table's own ``delta.deletedFileRetentionDuration``); ``full``, also the files no
    log entry names any more. A path without a table has nothing to delete."""
    table = open_table(path)
    if table is None:
        return []
    if retention_hours is None:
        return table.vacuum(dry_run=dry_run, full=full)
    return table.vacuum(retention_hours=retention_hours, dry_run=dry_run,
                        enforce_retention_duration=False, full=full)
