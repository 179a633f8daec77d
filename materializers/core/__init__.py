"""The materializer core: the Sink protocol, the consumer loop's skeleton (consumer.py) and the
replica's and search view's loop on it (loop.py), and what every loop shares (positions.py,
poison.py, watermarks.py, ownership.py, clients.py); docs/materializers.md shows how they fit."""

from materializers.core.changes import Change, Op, TableId, TopicPartition, freeze, table_of
from materializers.core.decode import DecodeError, Decoder
from materializers.core.lag import LagTracker
from materializers.core.loop import Materializer
from materializers.core.memory import MemorySink
from materializers.core.poison import PoisonMessage
from materializers.core.sink import Offsets, OffsetsMoved, RejectedChange, Sink

__all__ = [
    "Change", "DecodeError", "Decoder", "LagTracker", "Materializer", "MemorySink", "Offsets",
    "OffsetsMoved", "Op", "PoisonMessage", "RejectedChange", "Sink", "TableId", "TopicPartition",
    "freeze", "table_of",
]
