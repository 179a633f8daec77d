"""Where a view stands in each partition, and the two events that move it backwards, once for
every loop (the consumer loop moves a consumer, the warehouse job its next batch's ranges).

**Truncate barriers.** A truncate event names a table topic and that topic's end offset per
partition at the truncate: every message of the topic before those offsets is void. Meeting the
event, a view applies a ``truncate`` change and moves each of the topic's partitions to its
barrier: a partition not there yet skips the void messages; one already past it (its later
messages were applied before the event was read: topics are read independently) goes back to
the barrier and applies them again, after the truncate.

**A lost log end.** A partition whose log now ends before the view's position lost its end in
the broker (a restart from an older save, an unclean leader election), and its offsets may now
hold other messages than the ones applied. Which ones cannot be known, so the partition is read
again from the start, and the truncate events with it (their barriers void what came before
them again). Replays are harmless: writes are idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Mapping

from confluent_kafka import Message

from materializers.core.changes import Change, TopicPartition
from materializers.core.decode import Decoder, truncate_event

log = logging.getLogger(__name__)


def barrier(decoder: Decoder, msg: Message, is_table_topic: Callable[[str], bool]
            ) -> tuple[Change, dict[TopicPartition, int]] | None:
    """The ``truncate`` change of a truncate event and the positions its barrier sets; None
    for a truncate of a topic the view does not read. DecodeError for a broken event."""
    topic, table, offsets = truncate_event(decoder, msg.value())
    if not is_table_topic(topic):
        return None
    change = Change(topic=topic, table=table, op="truncate", key=None, value=None,
                    partition=msg.partition(), offset=msg.offset(), barrier=offsets,
                    timestamp=msg.timestamp()[1])
    return change, {(topic, partition): offset for partition, offset in offsets.items()}


def follow(name: str, barrier: Mapping[TopicPartition, int],
           position: Callable[[TopicPartition], int | None],
           held: Container[TopicPartition]) -> dict[TopicPartition, int]:
    """The positions a truncate's ``barrier`` moves: each of its partitions not at the barrier
    already (``position``: where the view stands, None if unknown). A ``held`` partition past
    its barrier is replayed from it (said in the log); the caller moves its reader."""
    moves: dict[TopicPartition, int] = {}
    for tp, offset in barrier.items():
        current = position(tp)
        if current is not None and current == offset:
            continue
        moves[tp] = offset
        if current is not None and current > offset and tp in held:
            log.info("%s: truncate of %s: replaying %s[%d] from %d", name, tp[0], *tp, offset)
    return moves


def lost_ends(positions: Mapping[TopicPartition, int],
              highs: Mapping[TopicPartition, int]) -> list[TopicPartition]:
    """The partitions whose log (``highs``: their high watermarks) ends before our position."""
    return [tp for tp, high in highs.items() if 0 <= high < positions.get(tp, 0)]


def replayed(name: str, lost: list[TopicPartition], partitions: Iterable[TopicPartition],
             truncate_topic: str | None) -> list[TopicPartition]:
    """The partitions to read again from offset 0 for the ``lost`` ones: those, and every
    partition of the truncate topic among ``partitions`` (none for a view without one)."""
    if not lost:
        return []
    log.warning("%s: %s no longer reach our position (the broker lost messages): replaying from"
                " the start, with the truncate events", name,
                ", ".join(f"{t}[{p}]" for t, p in lost))
    return list(lost) + [tp for tp in partitions if tp[0] == truncate_topic and tp not in lost]
