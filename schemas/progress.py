"""The capture's progress records: how far a capture's snapshot got, kept in its compacted control
topic ``[prefix.]_bottler.capture`` (written by capture/setup/state.py), and read by the
replica's seed (materializers/postgres/seeding/capture_watch.py) to know when the capture has
made its slot and its table topics.

One record per slot, under the slot's name, a JSON object::

    {"snapshot": "started"}                                  the slot is being made
    {"snapshot": "started", "consistent_lsn": N, "layout": {...}}   its chunks are planned
    {"snapshot": "complete", "rows": N, "consistent_lsn": N}
    {"snapshot": "skipped"}                                  --skip-snapshot

``layout`` (the snapshot's chunks, so a restart resumes it) is written once the slot and the
table topics exist. Keys holding a ``/`` are other records: the snapshot's chunks and pieces
(``<slot>/chunk/<id>``, ``<slot>/piece/<id>``), incremental snapshots under way
(``<slot>/incremental/<schema>.<table>``), which only the capture reads, and topic ownership
(``topic/<topic>``, schemas/ownership.py).
"""

from __future__ import annotations

from typing import Any

SNAPSHOT = "snapshot"
STARTED = "started"
COMPLETE = "complete"
SKIPPED = "skipped"
LAYOUT = "layout"
CONSISTENT_LSN = "consistent_lsn"


def is_slot_key(key: str) -> bool:
    """Whether ``key`` names a slot's progress record (not a chunk's, a topic's...)."""
    return "/" not in key


def started(consistent_lsn: int | None = None, layout: dict | None = None) -> dict[str, Any]:
    """A snapshot started; with its consistent point and layout once its chunks are planned."""
    record: dict[str, Any] = {SNAPSHOT: STARTED}
    if consistent_lsn is not None:
        record[CONSISTENT_LSN] = consistent_lsn
    if layout is not None:
        record[LAYOUT] = layout
    return record


def complete(rows: int, consistent_lsn: int) -> dict[str, Any]:
    return {SNAPSHOT: COMPLETE, "rows": rows, CONSISTENT_LSN: consistent_lsn}


def skipped() -> dict[str, Any]:
    return {SNAPSHOT: SKIPPED}


def is_started(record: dict[str, Any]) -> bool:
    """A snapshot under way (its slot may still be being made)."""
    return record.get(SNAPSHOT) == STARTED


def is_planned(record: dict[str, Any]) -> bool:
    """A snapshot under way whose slot and table topics exist (its layout is recorded)."""
    return LAYOUT in record


def slot_and_topics_made(record: dict[str, Any]) -> bool:
    """The capture has made its slot and its table topics: its snapshot is planned, complete
    or skipped."""
    return record.get(SNAPSHOT) in (COMPLETE, SKIPPED) or is_planned(record)
