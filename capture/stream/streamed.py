"""Transactions the server streams before they commit (pgoutput protocol 2+): the messages
between a Stream Start and its Stream Stop are staged in the spool (capture/stream/spool.py)
until the transaction's Stream Commit replays them (capture/stream/replay.py), or its Stream
Abort drops them."""

from __future__ import annotations

from collections.abc import Iterator

from capture.health import metrics
from capture.source import messages
from capture.stream import pgoutput
from capture.stream.replay import Codecs, ReplayWorkers
from capture.stream.spool import Spool


class Streamed:
    def __init__(self, spool: Spool, workers: ReplayWorkers):
        self.spool = spool
        self.workers = workers
        self.block_xid: int | None = None  # between Stream Start and Stream Stop: its xid

    @property
    def waiting(self) -> bool:
        """A streamed transaction waits for its commit."""
        return bool(self.spool.open)

    def start(self, m: messages.StreamStart) -> None:
        self.block_xid = m.xid
        self.workers.warm()

    def stage(self, payload: bytes, lsn: int) -> None:
        """A message between Stream Start and Stream Stop: a change (or relation) of the open
        transaction, staged as it came until the transaction commits."""
        if payload[0] == pgoutput.STREAM_STOP:
            self.spool.block_end(self.block_xid)
            self.block_xid = None
            metrics.SPOOLED_BYTES.set(self.spool.bytes)
            return
        subxid = pgoutput.streamed_xid(payload)
        if subxid is not None:  # the Origin after a first Stream Start carries none
            self.spool.append(self.block_xid, subxid, lsn, payload)

    def replay(self, m: messages.StreamCommit, codecs: Codecs) -> Iterator[tuple[int, object]]:
        """The committed transaction's messages as they came, each with its WAL position; a row
        change a replay worker encoded comes as a capture.stream.replay.Encoded."""
        with self.spool.commit(m.xid) as staged:
            if staged is not None:
                yield from self.workers.replay(staged, codecs)

    def committed(self) -> None:
        metrics.SPOOLED_BYTES.set(self.spool.bytes)

    def abort(self, m: messages.StreamAbort) -> None:
        self.spool.abort(m.xid, m.subxid)
        metrics.SPOOLED_BYTES.set(self.spool.bytes)

    def close(self) -> None:
        self.workers.close()
