"""Transactions PostgreSQL streams before they commit (pgoutput protocol 2+, ``streaming``):
each is staged to a local file until its Stream Commit, then replayed as an ordinary transaction;
a Stream Abort drops the whole of it, or the rows of one aborted subtransaction.

Memory stays bounded whatever a transaction's size: of each open transaction only a file handle,
its aborted subtransactions' xids and where its runs of row changes begin are held (one per
2 MB of them, see Run). The files are scratch: a transaction the capture
did not see commit is streamed again, whole, by the next run (the slot's confirmed position never
passes a commit the capture did not publish), so whatever a killed run left is removed at start.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from common.errors import BottlerError

_RECORD = struct.Struct("!QII")  # the message's WAL position, its (sub)xid, its length
# Relation and Type messages are kept whatever subtransaction sent them: pgoutput sends a
# relation's description once per streamed transaction, in the subtransaction that first
# changed it, and the rest of the transaction relies on it.
_DESCRIPTIONS = frozenset(b"RY")
_CHANGES = frozenset(b"IUD")  # row changes: what replay workers encode (capture/stream/replay.py)
_BUFFER = 1 << 20  # bytes written or read at once
SEGMENT = 2 << 20  # bytes of row changes in one run at most: the unit replay workers share
_MAX_RUNS = 100_000  # past this many runs (changes and other messages alternating), no runs


class Run:
    """Records ``start:end`` of a staged file: only row changes, or (``changes`` False) only
    other messages (relations, truncates, logical messages), which replay on the main thread."""

    __slots__ = ("changes", "end", "start")

    def __init__(self, start: int, end: int, changes: bool) -> None:
        self.start, self.end, self.changes = start, end, changes


class Staged:
    """One open streamed transaction: its file, its aborted subtransactions, and its runs."""

    __slots__ = ("aborted", "file", "path", "runs", "size")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: BinaryIO = open(path, "wb", buffering=_BUFFER)  # noqa: SIM115 - kept open
        self.aborted: set[int] = set()  # subtransactions rolled back: their rows are dropped
        self.size = 0
        self.runs: list[Run] | None = []  # None: too many to keep (replayed in one go)

    def mark(self, start: int, end: int, changes: bool) -> None:
        runs = self.runs
        if runs is None:
            return
        if runs:
            last = runs[-1]
            if last.changes is changes and (not changes or end - last.start <= SEGMENT):
                last.end = end
                return
            if len(runs) >= _MAX_RUNS:
                self.runs = None
                return
        runs.append(Run(start, end, changes))

    def records(self, start: int = 0, end: int | None = None) -> Iterator[tuple[int, bytes]]:
        """Its messages from ``start`` to ``end`` (byte offsets of records) as ``(lsn,
        message)``, without the changes of its aborted subtransactions."""
        return records(self.path, start, self.size if end is None else end, self.aborted)


class Spool:
    """The open streamed transactions of one capture, each in a file under ``directory``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # rows of the source
        # One capture per directory (a lock on the directory itself): a second one would
        # remove the first one's files. The lock goes with the process, however it ends.
        self._lock = os.open(directory, os.O_RDONLY)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise BottlerError(
                f"another capture stages its streamed transactions in {directory}",
                "give each capture its own --stream-spool-dir",
            ) from None
        for leftover in directory.glob("*.stream"):  # a killed run's: streamed again
            leftover.unlink()
        self._open: dict[int, Staged] = {}

    @property
    def open(self) -> int:
        """How many streamed transactions wait for their commit or abort."""
        return len(self._open)

    @property
    def bytes(self) -> int:
        """What the open transactions hold on disk."""
        return sum(t.size for t in self._open.values())

    def append(self, xid: int, subxid: int, lsn: int, data: bytes) -> None:
        """Stage one message of transaction ``xid`` (sent for its subtransaction ``subxid``)."""
        staged = self._open.get(xid)
        if staged is None:
            staged = self._open[xid] = Staged(self.directory / f"{xid}.stream")
        staged.file.write(_RECORD.pack(lsn, subxid, len(data)) + data)
        start = staged.size
        staged.size += _RECORD.size + len(data)
        staged.mark(start, staged.size, data[0] in _CHANGES)

    def block_end(self, xid: int) -> None:
        """Stream Stop: the block is written out (to the OS: the files are scratch, never
        synced), so what is staged shows on disk between blocks."""
        if xid in self._open:
            self._open[xid].file.flush()

    def abort(self, xid: int, subxid: int) -> None:
        """Stream Abort: the whole transaction (``subxid == xid``) or one subtransaction."""
        if subxid == xid:
            self._drop(xid)
        elif xid in self._open:
            self._open[xid].aborted.add(subxid)

    @contextlib.contextmanager
    def commit(self, xid: int) -> Iterator[Staged | None]:
        """Stream Commit: the transaction as staged, written out and readable (None when
        nothing of it was published: no change in a published table); its file goes after."""
        staged = self._open.get(xid)
        if staged is None:
            yield None
            return
        staged.file.close()
        try:
            yield staged
        finally:
            self._drop(xid)

    def _drop(self, xid: int) -> None:
        staged = self._open.pop(xid, None)
        if staged is not None:
            staged.file.close()
            staged.path.unlink(missing_ok=True)

    def close(self) -> None:
        for xid in list(self._open):
            self._drop(xid)
        with contextlib.suppress(OSError):  # not empty: files of the user's own; keep them
            self.directory.rmdir()
        os.close(self._lock)


def records(path: Path, start: int, end: int, skip: set[int]) -> Iterator[tuple[int, bytes]]:
    """The records of a staged file from byte ``start`` to ``end`` (each a record's bounds) as
    ``(lsn, message)``, without the changes of the subtransactions in ``skip``."""
    header, keep = _RECORD.size, _DESCRIPTIONS
    unpack = _RECORD.unpack_from
    with open(path, "rb", buffering=0) as file:
        file.seek(start)
        left = end - start
        # records cut out of a megabyte read at once: two reads a record took a tenth of the
        # replay's time
        chunk, off, have = b"", 0, 0
        while True:
            if off + header <= have:
                lsn, subxid, size = unpack(chunk, off)
                first = off + header
                if first + size <= have:
                    off = first + size
                    if subxid not in skip or chunk[first] in keep:
                        yield lsn, chunk[first:off]
                    continue
                wanted = first + size - have  # a message larger than what is left
            else:
                wanted = header
            more = file.read(min(left, max(_BUFFER, wanted)))
            if not more:
                break
            left -= len(more)
            chunk, off = chunk[off:] + more, 0
            have = len(chunk)
        if off != have:
            raise BottlerError(f"{path} ends in the middle of a message",
                               "start the capture again: the server streams the "
                               "transaction again")
