"""The Sink protocol: what a target implements so the consumer loop can feed it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from materializers.core.changes import Change, TopicPartition

Offsets = Mapping[TopicPartition, int]
"""``(topic, partition) -> next offset to read`` (the last processed offset + 1, Kafka's
convention for committed offsets)."""


class RejectedChange(Exception):  # noqa: N818 - the name says what happened
    """Raised by :meth:`Sink.write` for one change the target refuses (a value it cannot store,
    a constraint it breaks): the loop sends that change's message to the dead-letter topic (or
    stops, by policy) and calls ``write`` again with the batch without it."""

    def __init__(self, change: Change, reason: str):
        super().__init__(f"{change.topic}[{change.partition}]@{change.offset}: {reason}")
        self.change = change
        self.reason = reason


class OffsetsMoved(Exception):  # noqa: N818 - the name says what happened
    """Raised by ``write`` or ``flush`` (nothing of the batch applied) when another instance of
    the view moved a partition's stored offsets since this one read or wrote them: a truncate
    set the partition to its barrier, or the partition was given to another instance. The loop
    reads the stored offsets again and resumes from them."""


@runtime_checkable
class Sink(Protocol):
    """A target the consumer loop writes to. The loop calls, one call at a time and in this
    order (``write`` and ``flush`` from a thread of its own while it reads the next batch)::

        stored_offsets(partitions)             # at every partition assignment
        write(changes, offsets); flush()       # per batch; then it commits the consumer offsets
        ...
        close()                                # by the sink's owner, not by the loop

    **stored_offsets(partitions)** — ``partitions`` is the list of ``(topic, partition)``
    just assigned. Return None if the sink keeps no offsets (the loop then starts from the
    consumer group's committed offsets, else from offset 0), or a mapping ``(topic, partition)
    -> next offset`` as made durable by the last successful ``flush``; a partition missing from
    it starts at 0 (a new target is rebuilt from the beginning). Anything written but not
    flushed before must be discarded by now: after ``write`` or ``flush`` raised, the loop stops,
    and a new loop on the same sink starts here.

    **write(changes, offsets)** — apply a batch, in list order. Per partition the order is the
    topic's; a key lives in one partition, so the last change of a key in the list wins. A
    ``truncate`` change removes every row of its table that an earlier change (this batch or
    before) put there, and none that a later change of the list puts there. Writes must be
    idempotent: after a crash the loop replays from the last durable offsets, so an upsert of a
    row already there, a delete of a row already gone and a truncate of an empty table are
    harmless. ``offsets`` are the offsets the batch brings every partition it covers to
    (control topics and skipped messages included); a sink that keeps offsets stores them with
    the data, atomically. May raise :class:`RejectedChange` for one change (nothing of the batch
    must be durable then; the loop calls ``write`` again without that change); any other
    exception is a failure of the target: the loop stops without committing.

    **flush()** — make every ``write`` since the last ``flush`` durable, with its offsets (one
    transaction commit for a database). Returns only once durable; raises otherwise, and then
    nothing of the batch may count as done: the loop stops without committing and the next run
    replays the batch. A target that only refuses a change when it is sent (a search cluster's
    bulk answer) may raise :class:`RejectedChange` here too: the loop sets it aside and calls
    ``write`` and ``flush`` again without it (what the refused flush applied is written again:
    writes are idempotent).

    **close()** — release connections; unflushed writes are discarded.
    """

    def stored_offsets(self, partitions: Sequence[TopicPartition]) -> Offsets | None: ...

    def write(self, changes: Sequence[Change], offsets: Offsets) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...
