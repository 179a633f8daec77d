"""Transactions PostgreSQL streams before they commit (pgoutput protocol 2+, ``streaming``):
each is staged to a local file until its Stream Commit, then replayed as an ordinary transaction;
a Stream Abort drops the whole of it, or the rows of one aborted subtransaction.

Memory stays bounded whatever a transaction's size: of each open transaction only a file handle
and its aborted subtransactions' xids are held. The files are scratch: a transaction the capture
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
_BUFFER = 1 << 20  # bytes written or read at once


class _Staged:
    __slots__ = ("aborted", "file", "path", "size")

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file: BinaryIO = open(path, "wb", buffering=_BUFFER)  # noqa: SIM115 - kept open
        self.aborted: set[int] = set()  # subtransactions rolled back: their rows are dropped
        self.size = 0


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
        self._open: dict[int, _Staged] = {}

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
            staged = self._open[xid] = _Staged(self.directory / f"{xid}.stream")
        staged.file.write(_RECORD.pack(lsn, subxid, len(data)) + data)
        staged.size += _RECORD.size + len(data)

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

    def commit(self, xid: int) -> Iterator[tuple[int, bytes]]:
        """Stream Commit: the transaction's messages in order, as ``(lsn, message)``, without
        the changes of its aborted subtransactions; the file goes once they are read."""
        staged = self._open.get(xid)
        if staged is None:
            return  # nothing of it was published (no change in a published table)
        staged.file.close()
        header, skip, keep = _RECORD.size, staged.aborted, _DESCRIPTIONS
        unpack = _RECORD.unpack_from
        try:
            with open(staged.path, "rb", buffering=0) as file:
                # records cut out of a megabyte read at once: two reads a record took a tenth
                # of the replay's time
                chunk, off, end = b"", 0, 0
                while True:
                    if off + header <= end:
                        lsn, subxid, size = unpack(chunk, off)
                        start = off + header
                        if start + size <= end:
                            off = start + size
                            if subxid not in skip or chunk[start] in keep:
                                yield lsn, chunk[start:off]
                            continue
                        wanted = start + size - end  # a message larger than what is left
                    else:
                        wanted = header
                    more = file.read(max(_BUFFER, wanted))
                    if not more:
                        break
                    chunk, off = chunk[off:] + more, 0
                    end = len(chunk)
                if off != end:
                    raise BottlerError(f"{staged.path} ends in the middle of a message",
                                       "start the capture again: the server streams the "
                                       "transaction again")
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
