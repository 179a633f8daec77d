"""Which WAL position may be confirmed to PostgreSQL: only one whose messages Kafka acknowledged.

Each transaction (or stand-alone event such as a heartbeat) is a *batch* holding the WAL position
to confirm once every message of it, and of every batch before it, is acknowledged. Kafka acks
arrive per partition, so out of commit order across partitions; batches are released strictly
in commit order.

No locks: confluent-kafka runs delivery callbacks inside poll()/flush(), on the thread that
produces, which is the only one using a tracker.
"""

from __future__ import annotations

from collections import deque


class Batch:
    __slots__ = ("failures", "lsn", "pending", "sealed")

    def __init__(self, failures: list) -> None:
        self.lsn = 0  # known once sealed (the commit's end LSN)
        self.pending = 0  # messages sent and not yet acknowledged
        self.sealed = False
        self.failures = failures  # the tracker's: failed deliveries wait there to be handled

    def delivered(self, err, msg) -> None:
        """confluent-kafka's delivery callback: a bound method, so no closure per message."""
        if err is None:
            self.pending -= 1
        else:
            self.failures.append((self, err, msg))


class AckTracker:
    def __init__(self, confirmed: int = 0):
        self._batches: deque[Batch] = deque()
        self._confirmed = confirmed
        self.failures: list[tuple[Batch | None, object, object]] = []

    def open(self) -> Batch:
        batch = Batch(self.failures)
        self._batches.append(batch)
        return batch

    def seal(self, batch: Batch, lsn: int) -> None:
        """The batch is complete: no more messages will be added; confirm ``lsn`` once acked."""
        batch.lsn = lsn
        batch.sealed = True

    def idle_at(self, lsn: int) -> None:
        """The server says WAL ends at ``lsn``: if nothing is in flight, it may be confirmed."""
        self._drain()
        if not self._batches and lsn > self._confirmed:
            self._confirmed = lsn

    @property
    def in_flight(self) -> int:
        return sum(b.pending for b in self._batches)

    def confirmed(self) -> int:
        """The highest LSN whose batch, and all before it, are sealed and fully acknowledged."""
        self._drain()
        return self._confirmed

    def _drain(self) -> None:
        while self._batches and self._batches[0].sealed and self._batches[0].pending == 0:
            self._confirmed = max(self._confirmed, self._batches.popleft().lsn)
