"""A committed streamed transaction replayed with worker processes.

Its runs of row changes (capture/stream/spool.py's Run, 2 MB each) are parsed and encoded by
workers side by side, each reading its run from the staged file itself, so nothing is pickled
going in; the main thread only sends what comes back, in the transaction's order, and handles
the other messages (relations, truncates, logical messages) itself, between the runs. Parsing and
encoding were two thirds of the main thread's replay, which no other core could share.

A change a worker cannot simply encode (TOASTed columns left out, a key that changed, a row that
does not encode or may be too large for Kafka, a table without a codec) comes back as it was
staged and takes the main thread's way, so every rule of capture/stream/changes.py stays in one
place. A transaction smaller than two runs replays on the main thread: the hand-over would cost
more than it saves."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

from capture.publish.encoding import CodecSpec, TableCodec, Unencodable
from capture.source import messages
from capture.source.messages import UNCHANGED
from capture.stream import pgoutput
from capture.stream.spool import SEGMENT, Staged, records
from common import gctune
from common.children import die_with_parent
from common.errors import BottlerError

log = logging.getLogger(__name__)

# A change a worker encoded: (relation oid, op, key, value). Anything else a replay yields is a
# parsed message.
Encoded = tuple
Codecs = Callable[[Iterable[int]], dict[int, TableCodec]]  # the current codecs of these oids


class ReplayWorkers:
    """``workers`` processes, started at the first streamed transaction (its changes are staged
    meanwhile) and kept; 0: every transaction replays on the main thread."""

    def __init__(self, workers: int, too_large: int):
        """``too_large``: key and value bytes past which the main thread handles a change (it
        keeps the row for a dead letter, capture/publish/publisher.py at_risk)."""
        self.workers = workers
        self.too_large = too_large
        self._pool: ProcessPoolExecutor | None = None

    def warm(self) -> None:
        if self.workers and self._pool is None:
            # spawn: the capture holds librdkafka's threads, never fork it
            self._pool = ProcessPoolExecutor(self.workers, mp.get_context("spawn"),
                                             initializer=_start, initargs=(os.getpid(),))
            for _ in range(self.workers):
                self._pool.submit(int)  # each worker imports while the transaction is staged

    def replay(self, staged: Staged, codecs: Codecs) -> Iterator[tuple[int, object]]:
        """The transaction's messages in order as ``(lsn, message)``, a row change as an
        :data:`Encoded` where a worker encoded it. ``codecs`` is asked as each run is handed
        out, so a run after a schema change is encoded with the new codec."""
        if not self.workers or staged.runs is None or staged.size < 2 * SEGMENT:
            for lsn, data in staged.records():
                yield lsn, pgoutput.parse_streamed(data)[1]
            return
        self.warm()
        pending: deque[Future] = deque()
        described: set[int] = set()  # the tables the transaction described so far
        try:
            for run in staged.runs:
                if not run.changes:
                    while pending:  # the changes before it first, in order
                        yield from _results(pending.popleft())
                    for lsn, data in staged.records(run.start, run.end):
                        message = pgoutput.parse_streamed(data)[1]
                        if type(message) is messages.Relation:
                            described.add(message.oid)
                        yield lsn, message
                    continue
                if len(pending) >= 2 * self.workers:
                    yield from _results(pending.popleft())
                specs = {oid: (c.serial, c.spec) for oid, c in codecs(described).items()}
                pending.append(self._pool.submit(
                    _encode_run, staged.path, run.start, run.end, staged.aborted, specs,
                    self.too_large))
            while pending:
                yield from _results(pending.popleft())
            log.info("a streamed transaction of %.0f MB replayed by %d workers",
                     staged.size / 2**20, self.workers)
        finally:
            for future in pending:
                future.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _results(future: Future) -> Iterator[tuple[int, object]]:
    try:
        done = future.result()
    except Exception as exc:  # noqa: BLE001 - a worker that died, or one that failed
        reason = getattr(exc, "message", None) or str(exc).strip() or type(exc).__name__
        raise BottlerError(f"replaying a streamed transaction failed: {reason}",
                           "run the capture again: the server streams the transaction again"
                           ) from None
    parse = pgoutput.parse_streamed
    for lsn, item in done:
        yield lsn, item if type(item) is tuple else parse(item)[1]


# -- worker process ----------------------------------------------------------------------------
_codecs: dict[int, TableCodec] = {}  # by TableCodec.serial: built once per worker


def _start(parent: int) -> None:
    die_with_parent(parent)  # a worker never outlives the capture, even one killed -9
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    gctune.tune()


def _encode_run(path: Path, start: int, end: int, skip: set[int],
                specs: dict[int, tuple[int, CodecSpec]], too_large: int) -> list:
    """The run's changes as ``(lsn, Encoded)``, or ``(lsn, message bytes)`` for the main
    thread."""
    serials = {serial for serial, _ in specs.values()}
    for serial in [s for s in _codecs if s not in serials]:
        del _codecs[serial]  # a table's older codec
    codecs = {}
    for oid, (serial, spec) in specs.items():
        codec = _codecs.get(serial)
        if codec is None:
            codec = _codecs[serial] = spec.codec()
        codecs[oid] = codec
    return [(lsn, _encoded(data, codecs, too_large) or data)
            for lsn, data in records(path, start, end, skip)]


def _encoded(data: bytes, codecs: dict[int, TableCodec], too_large: int) -> Encoded | None:
    """A change encoded as the main thread would (capture/stream/changes.py), or None where
    that takes more than its codec: the main thread handles it."""
    try:
        m = pgoutput.parse_streamed(data)[1]
    except messages.ProtocolError:
        return None  # the main thread says what is wrong
    codec = codecs.get(m.relation_oid)
    if codec is None:
        return None
    kind = type(m)
    try:
        if kind is messages.Insert:
            op, key, value = "insert", codec.key(m.new), codec.value(m.new)
        elif kind is messages.Update:
            if UNCHANGED in m.new:
                return None
            op, key = "update", codec.key(m.new)
            if m.old is not None and codec.keyed and codec.key(m.old) != key:
                return None  # a delete of the old key goes first
            value = codec.value(m.new)
        elif not codec.keyed:  # a delete of an unkeyed table: not published
            return None
        else:
            op, key, value = "delete", codec.key(m.old), None
    except Unencodable:
        return None
    if len(key or b"") + len(value or b"") > too_large:
        return None
    return m.relation_oid, op, key, value
