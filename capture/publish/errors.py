"""What stops the capture, or a row: a Kafka client that failed for good, and a row that cannot
be published as it is (which --on-error decides, capture/publish/dead_letters.py).

Both the publisher and the dead letters import this module, and it imports neither."""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.errors import BottlerError

if TYPE_CHECKING:
    from capture.publish.acks import Batch
    from capture.publish.row import Row

# What to do when a Kafka client of the capture failed for good: what Kafka did not acknowledge
# was never confirmed to PostgreSQL, so the slot sends it again to the next run.
RESUME = ("start the capture again: it resumes from the last confirmed position, which only "
          "ever moves behind Kafka's acknowledgements, so nothing is lost (a supervisor such as "
          "`bottler stack`, systemd or Kubernetes restarts it by itself)")


def producer_failed(what: str, reason: str) -> BottlerError:
    """The capture's end when a producer fails for good (a fatal error: the broker lost its
    producer state or acknowledged messages, or a gap `enable.gapless.guarantee` forbids)."""
    return BottlerError(f"{what} failed for good: {reason}; the capture stops", RESUME)


class DataError(Exception):
    """A row that cannot be published as it is (too large, unconvertible); --on-error decides.
    Made by whoever knows the row, with what is known of it: ``row`` (its text, for its dead
    letter), ``batch`` (where its acknowledgement counts) and ``refused`` (the key and value
    Kafka refused)."""

    def __init__(self, reason: str, row: Row | None = None, batch: Batch | None = None,
                 refused: tuple[bytes | None, bytes | None] | None = None):
        super().__init__(reason)
        self.row, self.batch, self.refused = row, batch, refused
