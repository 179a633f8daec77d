"""`bottler reindex NAME`: rebuild the index behind the alias from offset zero into a new
physical index while the old one keeps serving, then swap the alias atomically.

1. Create ``NAME-<n+1>`` (the highest version + 1), its periodic refresh off, and read every
   table topic from offset zero into it with a reader of its own (consumer group
   ``bottler-search-NAME-<n+1>``). The alias keeps serving ``NAME-<n>``, which the live reader
   keeps current.
2. Once the new index is less than ``max_lag`` messages behind the topics' ends, stop the
   rebuild reader (its last batch flushed, its offsets stored with the new index), give the
   index its refresh interval back (refreshing it), and move the alias in one ``_aliases``
   call: remove from the old index, add to the new one.
3. The live reader notices the move, releases the old index and continues the new one from the
   rebuild's offsets (reader.LiveReader): every write that landed during the rebuild is in the
   new index once it has caught up those last ``max_lag`` messages.
4. Wait until the old index is released (at most ``handover_timeout`` seconds: without a live
   reader nothing releases it), then, after ``retention`` seconds, delete it and its offsets,
   unless ``keep_old``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from common.errors import BottlerError
from common.kafka import Connection, reader_config
from materializers.search import indices
from materializers.search.client import SearchClient
from materializers.search.reader import ReaderOptions

log = logging.getLogger(__name__)

NO_TOPICS_GRACE = 15.0  # seconds to wait for table topics before building an empty index


@dataclass
class Reindexed:
    alias: str
    old: str | None
    new: str
    documents: int
    rebuild_seconds: float
    released: bool  # the live reader handed the old index over
    deleted: bool  # the old index is gone


def reindex(client: SearchClient, alias: str, options: ReaderOptions, *, max_lag: int = 100,
            retention: float = 0.0, keep_old: bool = False, handover_timeout: float = 30.0,
            timeout: float | None = None, say: Callable[[str], None] = log.info,
            abandon: threading.Event | None = None) -> Reindexed:
    """Rebuild ``alias`` into a new physical index and swap. Should the rebuild fail, time out
    or be abandoned (``abandon`` set, as SIGTERM does) before the swap, the new index, which
    nothing has served, is deleted: the alias keeps serving the old one."""
    old = indices.alias_target(client, alias)
    if old is not None:  # the alias at a user's index: neither its reader nor ours may delete it
        indices.require_own(client, old, alias)
    new = indices.physical_name(alias, indices.next_version(client, alias))
    say(f"{alias}: rebuilding into {new} from offset 0"
        + (f" while {old} serves the alias" if old else ""))
    started = time.monotonic()
    indices.create_index(client, new, options.definition)  # fails if another run took the name
    try:
        refresh = indices.pause_refresh(client, new)  # given back before the swap
        sink, loop = options.reader(client, new, alias)
    except BaseException:
        indices.delete_index(client, new)
        raise
    behind = _catch_up(client, alias, old, new, sink, loop, started, max_lag=max_lag,
                       timeout=timeout, say=say, abandon=abandon)
    # refreshing again, and refreshed before it serves: a query on the alias never sees it empty
    indices.resume_refresh(client, new, refresh)
    indices.swap(client, alias, old, new)
    rebuilt = time.monotonic() - started
    documents = client.request("GET", f"/{new}/_count")["count"]
    say(f"{alias}: now served by {new} ({documents:,} documents, {behind:,} messages behind "
        f"at the swap, rebuilt in {rebuilt:.1f} s)")
    result = Reindexed(alias, old, new, documents, rebuilt, released=False, deleted=False)
    if old is None:
        return result
    _retire(client, alias, result, handover_timeout=handover_timeout, keep_old=keep_old,
            retention=retention, say=say, abandon=abandon)
    return result


def _catch_up(client: SearchClient, alias: str, old: str | None, new: str, sink, loop,
              started: float, *, max_lag: int, timeout: float | None,
              say: Callable[[str], None], abandon: threading.Event | None) -> int:
    """Run ``loop`` into ``new`` until it is at most ``max_lag`` messages behind, then stop it
    (its last batch flushed, its offsets stored with ``new``); the messages it is behind. A
    failure, a timeout or ``abandon`` deletes ``new`` and raises."""
    stop = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            loop.run(stop)
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread
            failure.append(exc)

    def finish_rebuild() -> None:  # its last batch flushed, its offsets stored with ``new``
        stop.set()
        thread.join()
        sink.close()

    thread = threading.Thread(target=run, name=f"rebuild-{new}", daemon=True)
    thread.start()
    try:
        while not failure:
            if abandon is not None and abandon.is_set():
                raise BottlerError(f"the rebuild of {alias} was stopped before the swap",
                                   f"run bottler reindex {alias} again")
            lag = loop.lag()
            known = [v for v in lag.values() if v is not None]
            if lag and len(known) == len(lag) and sum(known) <= max_lag:
                break
            waited = time.monotonic() - started
            if not lag and waited > NO_TOPICS_GRACE:
                say(f"{alias}: no table topic to read: {new} stays empty")
                break
            if timeout is not None and waited > timeout:
                raise BottlerError(f"{new} is still {sum(known):,} messages behind after "
                                   f"{timeout:.0f} s", "raise --timeout or --max-lag")
            time.sleep(0.2)
        if failure:
            raise failure[0]
    except BaseException:
        finish_rebuild()
        indices.delete_index(client, new)
        say(f"{alias}: unfinished {new} deleted; "
            + (f"{old} still serves the alias" if old else "the alias was not created"))
        raise
    finish_rebuild()
    return sum(v or 0 for v in loop.lag().values())


def _retire(client: SearchClient, alias: str, result: Reindexed, *, handover_timeout: float,
            keep_old: bool, retention: float, say: Callable[[str], None],
            abandon: threading.Event | None) -> None:
    """After the swap: wait for the live reader to release the old index, then delete it
    (after ``retention`` seconds) unless ``keep_old``; recorded in ``result``."""
    old, new = result.old, result.new
    result.released = wait_released(client, old, handover_timeout)
    if not result.released:
        say(f"{alias}: no live reader released {old} within {handover_timeout:.0f} s (none "
            f"running?); the next `bottler materialize search --index {alias}` continues {new}")
    if keep_old:
        say(f"{alias}: {old} kept (--keep-old)")
        return
    if retention > 0:
        say(f"{alias}: deleting {old} in {retention:.0f} s")
        if (abandon or threading.Event()).wait(retention):
            say(f"{alias}: stopped: {old} kept, delete it with "
                f"`curl -X DELETE <search>/{old}` once nothing reads it")
            return
    indices.delete_index(client, old)
    result.deleted = True
    say(f"{alias}: {old} deleted")


def wait_released(client: SearchClient, index: str, timeout: float) -> bool:
    store = indices.OffsetStore(client)
    deadline = time.monotonic() + timeout
    while True:
        doc = store.get(index)
        if doc is not None and doc.get("released"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.2)


# -- status -------------------------------------------------------------------------------


@dataclass
class IndexStatus:
    index: str
    serving: bool  # the alias points to it
    documents: int
    lag: int | None  # messages behind the topics' ends (None: never flushed)
    released: bool
    updated_at: int | None  # epoch ms of its last flush


def status(client: SearchClient, alias: str, bootstrap: Connection) -> list[IndexStatus]:
    """Every physical index of ``alias``, oldest first, with its lag against the topics."""
    serving = indices.alias_target(client, alias)
    store = indices.OffsetStore(client)
    found = indices.versions(client, alias)
    rows = []
    consumer = Consumer(reader_config(bootstrap, "search-status"))
    try:
        for name in sorted(found, key=found.get):
            doc = store.get(name)
            uuid = client.index_uuid(name)
            offsets = store.offsets(name, uuid) if uuid else {}
            lag = None
            if offsets:
                lag = 0
                for (topic, partition), next_offset in offsets.items():
                    _, high = consumer.get_watermark_offsets(
                        KafkaTopicPartition(topic, partition), timeout=10, cached=False)
                    lag += max(0, high - next_offset)
            count = client.request("GET", f"/{name}/_count", ok=(404,)).get("count", 0)
            rows.append(IndexStatus(name, name == serving, count, lag,
                                    bool(doc and doc.get("released")),
                                    doc.get("updated_at") if doc else None))
    finally:
        consumer.close()
    return rows
