"""The materializer core: the consumer loop every materializer runs, and the Sink protocol."""

from materializers.core.changes import Change, Op, TableId, TopicPartition, freeze, table_of
from materializers.core.decode import DecodeError, Decoder
from materializers.core.lag import LagTracker
from materializers.core.loop import Materializer, PoisonMessage
from materializers.core.memory import MemorySink
from materializers.core.sink import Offsets, RejectedChange, Sink

__all__ = [
    "Change", "DecodeError", "Decoder", "LagTracker", "Materializer", "MemorySink", "Offsets",
    "Op", "PoisonMessage", "RejectedChange", "Sink", "TableId", "TopicPartition", "freeze",
    "table_of",
]
