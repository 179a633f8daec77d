"""The transaction being streamed, from its Begin to its Commit."""

from __future__ import annotations

from dataclasses import dataclass

from capture.publish.acks import Batch
from capture.source import messages


@dataclass(slots=True)
class Transaction:
    xid: int
    final_lsn: int  # its commit's WAL position
    commit_time: int  # PostgreSQL's: microseconds since 2000-01-01 UTC
    commit_header: bytes  # the commit time in Unix microseconds, the bottler.commit_time header
    batch: Batch  # where the acknowledgements of its messages count

    @classmethod
    def begin(cls, m: messages.Begin, batch: Batch) -> Transaction:
        return cls(m.xid, m.final_lsn, m.commit_time,
                   b"%d" % messages.pg_time_to_unix_micros(m.commit_time), batch)
