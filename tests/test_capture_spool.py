"""The capture's staging of streamed transactions (capture/stream/spool.py): what a Stream Commit
replays, what a Stream Abort drops, and one capture per directory."""

from __future__ import annotations

import os
import struct

import pytest

from capture.stream.spool import SEGMENT, Spool
from common.errors import BottlerError

TOP, SUB, OTHER = 700, 701, 900


def change(kind: bytes, xid: int, body: bytes) -> bytes:
    """A streamed message as pgoutput sends it: its kind, its (sub)transaction's xid, a body."""
    return kind + struct.pack("!I", xid) + body


def committed(spool: Spool, xid: int) -> list[tuple[int, bytes]]:
    """What a Stream Commit of ``xid`` replays, read in one go."""
    with spool.commit(xid) as staged:
        return [] if staged is None else list(staged.records())


def test_a_commit_replays_in_order_without_the_aborted_subtransactions_changes(tmp_path):
    spool = Spool(tmp_path / "spool")
    try:
        messages = [(10, change(b"R", SUB, b"relation")), (11, change(b"I", TOP, b"kept 1")),
                    (12, change(b"I", SUB, b"dropped")), (13, change(b"I", TOP, b"kept 2"))]
        for lsn, data in messages:
            spool.append(TOP, struct.unpack_from("!I", data, 1)[0], lsn, data)
        spool.append(OTHER, OTHER, 20, change(b"I", OTHER, b"other"))
        spool.block_end(TOP)
        assert spool.open == 2 and spool.bytes > 0
        spool.abort(TOP, SUB)  # ROLLBACK TO SAVEPOINT: its changes go, its relation stays
        replayed = committed(spool, TOP)
        assert replayed == [messages[0], messages[1], messages[3]]
        spool.abort(OTHER, OTHER)  # the whole transaction
        assert committed(spool, OTHER) == []
        assert spool.open == 0
        assert not any((tmp_path / "spool").iterdir())  # nothing staged is left
    finally:
        spool.close()
    assert not (tmp_path / "spool").exists()  # nor the directory, nor a lock file


def test_one_capture_per_directory_and_a_killed_ones_files_are_removed(tmp_path):
    directory = tmp_path / "spool"
    first = Spool(directory)
    first.append(TOP, TOP, 1, change(b"I", TOP, b"row"))
    first.block_end(TOP)
    with pytest.raises(BottlerError) as refused:
        Spool(directory)
    assert "another capture" in refused.value.message
    assert list(directory.iterdir())  # the first one's files are untouched
    os.close(first._lock)  # as when its process is killed: the kernel releases the lock
    second = Spool(directory)
    try:
        assert not any(directory.iterdir())  # what the killed run staged is streamed again
    finally:
        second.close()


def test_messages_across_and_beyond_the_read_size_come_back_whole(tmp_path):
    """The replay reads a megabyte at a time: records cut by a read's end, and a message larger
    than a read, come back as they were staged."""
    spool = Spool(tmp_path / "spool")
    try:
        sizes = [100] * 20_000 + [3_000_000] + [70_000] * 40 + [5]
        messages = [(lsn, change(b"I", TOP, os.urandom(size)))
                    for lsn, size in enumerate(sizes, 1)]
        for lsn, data in messages:
            spool.append(TOP, TOP, lsn, data)
        assert committed(spool, TOP) == messages
    finally:
        spool.close()


def test_runs_split_changes_from_other_messages_and_read_back_whole(tmp_path):
    """Replay workers share a transaction by its runs (capture/stream/replay.py): row changes
    in runs of at most SEGMENT bytes, every other message in runs of their own, and the runs
    read one by one give back every record in order."""
    spool = Spool(tmp_path / "spool")
    try:
        messages = [(1, change(b"R", TOP, b"relation"))]
        messages += [(lsn, change(b"I", TOP, os.urandom(200))) for lsn in range(2, 30_000)]
        messages += [(30_000, change(b"T", TOP, b"truncate")), (30_001, change(b"M", TOP, b"m"))]
        messages += [(lsn, change(b"U", TOP, b"u")) for lsn in range(30_002, 30_100)]
        for lsn, data in messages:
            spool.append(TOP, TOP, lsn, data)
        with spool.commit(TOP) as staged:
            runs = staged.runs
            kinds = [r.changes for r in runs]
            assert kinds[0] is False and kinds[-2:] == [False, True]
            assert kinds[1:-2] == [True] * (len(kinds) - 3) and len(kinds) - 3 >= 2
            assert all(r.end - r.start <= SEGMENT for r in runs)
            assert [r.start for r in runs[1:]] == [r.end for r in runs[:-1]]  # no gap
            assert runs[-1].end == staged.size
            read = [record for r in runs for record in staged.records(r.start, r.end)]
        assert read == messages
    finally:
        spool.close()
