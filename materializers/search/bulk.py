"""``_bulk`` requests: actions cut into requests of bounded size, items the cluster asks to retry
(429, 5xx) sent again with backoff, every other item's outcome reported one by one.

Every write carries an external version, ``version_type=external_gte``, version = the Kafka
offset of the message it comes from (offsets only grow within a partition, and a key always
lives in one partition). A replayed write (the same offset) is applied again harmlessly; an
older one (a lower offset) is refused with 409 and counts as done: the index already holds
something newer.
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import orjson

from materializers.core.changes import Change
from materializers.search.client import RETRY_STATUSES, SearchClient, SearchError, decode_answer

log = logging.getLogger(__name__)

VERSION_TYPE = "external_gte"
# a tenth of the answer; "errors" first, so an answer without any is known without parsing
FILTER = {"filter_path": "errors,items.*.status,items.*.error"}
ALL_WRITTEN = b'{"errors":false'


@dataclass(slots=True)
class Action:
    """One document write: ``doc`` to index, or None to delete ``doc_id``."""

    doc_id: str
    doc: dict[str, Any] | None
    version: int
    change: Change | None  # where it came from (None for a truncate's deletes)

    def lines(self) -> bytes:
        meta = b'{"_id":%b,"version":%d,%b}}\n' % (_json(self.doc_id), self.version,
                                                    _VERSION_TYPE)
        if self.doc is None:
            return b'{"delete":' + meta
        return b'{"index":' + meta + _json(self.doc) + b"\n"


def _json(value: Any) -> bytes:
    """orjson: a document in an eighth of the standard library's time, which is a tenth of the
    view's CPU per row. What orjson refuses (an integer past 64 bits, a key that is not a
    string: a transform's output) goes through the standard library, which may take it.
    A float NaN or infinity, which only a transform can put there, is written as null (JSON has
    neither); the columns' own are strings (fields.py)."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return _stdlib(value).encode()


_stdlib = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode
_VERSION_TYPE = f'"version_type":"{VERSION_TYPE}"'.encode()


def bulk_answer(data: bytes) -> Any:
    """A bulk answer, decoded only if some item failed: during a rebuild none does, and
    parsing a thousand items costs as much as encoding a hundred documents."""
    return {"errors": False} if data.startswith(ALL_WRITTEN) else decode_answer(data)


@dataclass
class Outcome:
    """What a bulk run did: counts, and the actions the cluster refused (with the reason)."""

    written: int = 0
    stale: int = 0  # refused as older than what the index holds: nothing to do
    requests: int = 0
    rejected: list[tuple[Action, str]] | None = None

    def add(self, other: Outcome) -> None:
        self.written += other.written
        self.stale += other.stale
        self.requests += other.requests
        self.rejected.extend(other.rejected)


# Below this many actions a write is one request: splitting a live batch of a few documents
# would only add requests.
MIN_SPLIT = 500


class BulkWriter:
    """Sends actions to one index. ``max_actions``/``max_bytes`` bound a request; up to
    ``concurrency`` requests are in flight at once (the next one is serialised meanwhile);
    ``retries`` rounds for retryable items, with backoff from ``backoff`` seconds, doubling.

    A write of more than MIN_SPLIT actions is cut into at least ``concurrency`` requests: the
    engine runs one bulk request on one write thread, so a batch sent as one request would
    index on one core. Two of 2,500 each measured 1.6× one of 5,000 (OpenSearch 2.19, warm, a
    one-shard index), at the same CPU per document."""

    def __init__(self, client: SearchClient, index: str, *, max_actions: int = 1000,
                 max_bytes: int = 8 << 20, concurrency: int = 2, retries: int = 8,
                 backoff: float = 0.2, max_backoff: float = 10.0):
        self.client = client
        self.concurrency = concurrency
        self._pool = ThreadPoolExecutor(concurrency, thread_name_prefix="bulk") \
            if concurrency > 1 else None
        self.path = f"/{quote(index)}/_bulk"
        self.max_actions = max_actions
        self.max_bytes = max_bytes
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff

    def write(self, actions: list[Action]) -> Outcome:
        """Send every action; returns once every request is answered (raises if one failed,
        after the others were)."""
        outcome = Outcome(rejected=[])
        if self._pool is None:
            for chunk in self._chunks(actions):
                outcome.add(self._send(chunk))
            return outcome
        in_flight: list[Future] = []
        try:
            for chunk in self._chunks(actions):
                if len(in_flight) >= self.concurrency:
                    outcome.add(in_flight.pop(0).result())
                in_flight.append(self._pool.submit(self._send, chunk))
        finally:
            errors = [exc for f in in_flight if (exc := f.exception()) is not None]
        if errors:
            raise errors[0]
        for future in in_flight:
            outcome.add(future.result())
        return outcome

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _chunks(self, actions: list[Action]):
        limit = min(self.max_actions, max(MIN_SPLIT, -(-len(actions) // self.concurrency)))
        chunk: list[tuple[Action, bytes]] = []
        size = 0
        for action in actions:
            try:
                data = action.lines()
            except (TypeError, ValueError) as exc:  # not JSON-able: a transform's output
                raise SearchError(f"document {action.doc_id}: {exc}") from exc
            if chunk and (len(chunk) >= limit or size + len(data) > self.max_bytes):
                yield chunk
                chunk, size = [], 0
            chunk.append((action, data))
            size += len(data)
        if chunk:
            yield chunk

    def _send(self, chunk: list[tuple[Action, bytes]]) -> Outcome:
        outcome = Outcome(rejected=[])
        delay = self.backoff
        for attempt in range(self.retries + 1):
            answer = self.client.request("POST", self.path, b"".join(d for _, d in chunk),
                                         params=FILTER, ndjson=True, decode=bulk_answer)
            outcome.requests += 1
            if answer.get("errors") is False:
                outcome.written += len(chunk)
                return outcome
            items = answer.get("items", [])
            if len(items) != len(chunk):
                raise SearchError(f"bulk answer has {len(items)} items for {len(chunk)} actions")
            retry, refused = [], Counter()
            for (action, data), item in zip(chunk, items, strict=True):
                (op, result), = item.items()
                status = result.get("status", 500)
                if status < 300 or (op == "delete" and status == 404):
                    outcome.written += 1
                elif status == 409:
                    outcome.stale += 1
                elif status in RETRY_STATUSES or status >= 500:
                    retry.append((action, data))
                    refused[status] += 1
                else:
                    error = result.get("error", {})
                    reason = (f"{error.get('type')}: {error.get('reason')}"
                              if isinstance(error, dict) else str(error))
                    outcome.rejected.append((action, f"{status} {reason}"))
            if not retry:
                return outcome
            for status in refused:  # one answer that asked to retry, whatever its items
                self.client.count_refused(status)
            if attempt == self.retries:
                raise SearchError(f"{len(retry)} documents still refused after "
                                  f"{self.retries} retries (the cluster is overloaded)",
                                  hint="the batch is replayed when the materializer restarts")
            log.warning("bulk: %d of %d items refused (status %s), retrying in %.1f s",
                        len(retry), len(chunk), ", ".join(map(str, sorted(refused))), delay)
            time.sleep(delay)
            delay = min(delay * 2, self.max_backoff)
            chunk = retry
