"""The search sink: a :class:`~materializers.core.sink.Sink` keeping one physical index current.

A search index has no transaction to keep offsets with the data, so:

- ``write`` only turns the batch into bulk actions (documents converted, the transform applied:
  a value that cannot be converted is a :class:`RejectedChange` there); nothing reaches the
  cluster before ``flush``.
- ``flush`` sends them, cut at truncates, then writes the batch's offsets into the index's
  offsets document (``bottler-offsets``). A crash in between leaves documents ahead of the
  stored offsets: the restart replays them, which external versions make harmless (a write
  carries its message's offset as version; see bulk.py).
- A document the cluster refuses (a mapping conflict, a value it cannot parse) fails the flush
  with :class:`RejectedChange` for that row, after the batch's other documents were written and
  before its offsets are: the replay after a restart applies them again, idempotently.

A column added with a default (schemas.evolution): when a table's changes first bring it, the
documents of the table already in the index that lack the field take the default, by an
``_update_by_query`` among the flush's bulk requests, after the documents that came before
it. The sink remembers what it applied per table until it stops; a new sink applies the defaults
of the first version it meets once more, to the documents still without the field (none, but
those older than the column that a crash kept from it): a document with the field, NULL
included, is left as it is. The update raises the documents' versions by one, which the next
write of a document (a later offset) still passes.

Truncates delete the table's documents (by ``_bottler_table``), each with its own version as an
external version: a row replayed after the truncate (the loop rewinds partitions read past the
truncate's barrier) is then written again, where a delete-by-query's internal version would
refuse it as stale.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from common.errors import BottlerError
from materializers.core.changes import Change, TableId, TopicPartition
from materializers.core.sink import Offsets, RejectedChange
from materializers.search import indices
from materializers.search.bulk import Action, BulkWriter
from materializers.search.client import SearchClient, SearchError
from materializers.search.documents import TABLE_FIELD, Layout, Transform, document_id
from schemas.evolution import Evolution

log = logging.getLogger(__name__)

TRUNCATE_PAGE = 5000  # documents deleted per round of a truncate
# Actions per bulk request: a whole batch of the loop's default size in one request. The engine
# spends about a quarter less CPU per document than in requests of 1,000 (OpenSearch 2.19, warm:
# 5.1 against 6.7 CPU s per 200k documents; its own _bulk of 5,000, 5.0): per-request work
# (the translog's sync, the write threads' hand-offs) is paid once per request.
BULK_ACTIONS = 5000


class _Truncate:
    """A truncate among a batch's actions."""

    __slots__ = ("table",)

    def __init__(self, table: TableId):
        self.table = table


class _Fill:
    """Defaults for a table's documents that lack the fields (column -> JSON value)."""

    __slots__ = ("table", "values")

    def __init__(self, table: TableId, values: dict[str, Any]):
        self.table = table
        self.values = values


# sets the field on a document without it; one that has it (NULL included) is left as it is
FILL_SCRIPT = ("if (ctx._source.containsKey(params.field)) { ctx.op = 'noop' } "
               "else { ctx._source[params.field] = params.value }")


class SearchSink:
    """Writes changes into the physical index ``index`` (created if missing, with
    ``definition``: see indices.load_definition). ``alias``: the alias this index serves (kept
    in the offsets document, for status). ``transform(doc, change)``: see
    documents.load_transform. ``group_id``: the consumer group of its reader
    (``bottler-search-<index>`` by default).

    Counters: ``written``, ``stale`` (writes older than the index's document), ``flushes``,
    ``requests``.
    """

    def __init__(self, client: SearchClient | str, index: str, *, alias: str | None = None,
                 definition: dict[str, Any] | None = None, transform: Transform | None = None,
                 group_id: str | None = None, max_actions: int = BULK_ACTIONS,
                 concurrency: int = 2):
        self.client = SearchClient(client) if isinstance(client, str) else client
        self.index = index
        self.alias = alias
        self.definition = definition or {}
        self.transform = transform
        self.group_id = group_id or f"bottler-search-{index}"
        self.flattened = self.client.flavour().flattened
        self.uuid = self.client.index_uuid(index)
        if self.uuid is None:
            indices.create_index(self.client, index, self.definition)
            self.uuid = self.client.index_uuid(index)
        else:
            indices.require_own(self.client, index, alias)
        self.store = indices.OffsetStore(self.client)
        self.bulk = BulkWriter(self.client, index, max_actions=max_actions,
                               concurrency=concurrency)
        self.written = self.stale = self.flushes = self.requests = 0
        self._overridden = set(self.definition.get("mappings", {}).get("properties", {}))
        self._mapped: set[str] = self._current_fields()
        self._layouts: dict[int, Layout] = {}  # value schema id -> layout
        self._put: set[int] = set()  # layouts whose fields are in the mapping
        self._durable: dict[TopicPartition, int] = self.store.offsets(index, self.uuid)
        self._evolutions: dict[TableId, Evolution] = {}  # as of the last flush
        self._pending: list[Action | _Truncate | _Fill] = []
        self._pending_offsets: dict[TopicPartition, int] = {}
        self._pending_layouts: dict[int, Layout] = {}
        self._pending_evolutions: dict[TableId, Evolution] = {}
        self._feeds: dict[TableId, str] = {}  # the topic each table's documents come from

    # -- the Sink protocol --------------------------------------------------------------

    def stored_offsets(self, partitions: Sequence[TopicPartition]) -> Offsets | None:
        self._discard()
        self._durable = self.store.offsets(self.index, self.uuid)
        return {tp: self._durable[tp] for tp in partitions if tp in self._durable}

    def write(self, changes: Sequence[Change], offsets: Offsets) -> None:
        staged: list[Action | _Truncate | _Fill] = []
        layouts: dict[int, Layout] = {}
        evolutions: dict[TableId, Evolution] = {}
        for change in changes:
            if change.op == "truncate":
                staged.append(_Truncate(change.table))
                continue
            if self._feeds.setdefault(change.table, change.topic) != change.topic:
                raise BottlerError(
                    f"index {self.index}: topics {self._feeds[change.table]} and {change.topic}"
                    f" both hold table {change.table}: their documents would share ids",
                    "give each capture its own --index (or read only one of the topics)")
            if change.op == "upsert" and change.value_schema is not None:
                fill = self._fill_for(change, layouts, evolutions)
                if fill is not None:
                    staged.append(fill)
            staged.append(self._action(change, layouts))
        self._pending.extend(staged)
        self._pending_offsets.update(offsets)
        self._pending_layouts.update(layouts)
        self._pending_evolutions.update(evolutions)

    def flush(self) -> None:
        try:
            segment: dict[str, Action] = {}
            for item in self._pending:
                if isinstance(item, _Truncate):
                    self._send(segment)
                    segment = {}
                    self._truncate(item.table)
                elif isinstance(item, _Fill):
                    self._send(segment)
                    segment = {}
                    self._fill(item)
                else:
                    segment.pop(item.doc_id, None)  # the last change of a document wins
                    segment[item.doc_id] = item
            self._send(segment)
            if self._pending_offsets:
                # other instances of the view (one consumer group) store the partitions they
                # hold in the same document: theirs are taken as they are now
                offsets = {**self.store.offsets(self.index, self.uuid), **self._pending_offsets}
                self.store.save(self.index, self.uuid, self.alias, offsets)
                self._durable = offsets
            self._evolutions.update(self._pending_evolutions)
            self.flushes += 1
        finally:
            self._discard()

    def close(self) -> None:
        self._discard()
        self.bulk.close()

    # -- beyond the protocol ------------------------------------------------------------

    def release(self) -> None:
        """Mark the index as handed over: its reader has stopped writing to it for good."""
        self.store.save(self.index, self.uuid, self.alias, self._durable, released=True)

    @property
    def offsets(self) -> dict[TopicPartition, int]:
        """The offsets made durable by the last flush."""
        return dict(self._durable)

    # -- documents ------------------------------------------------------------------------

    def _action(self, change: Change, layouts: dict[int, Layout]) -> Action:
        doc_id = document_id(change)
        if change.op == "delete":
            return Action(doc_id, None, change.offset, change)
        layout = self._layout(change, layouts)
        table = str(change.table)
        try:
            doc = layout.document(change.value, table)
            if self.transform is not None:
                doc = self.transform(doc, change)
                if doc is not None:
                    doc[TABLE_FIELD] = table
        except Exception as exc:  # noqa: BLE001 - this row only; the loop sets it aside
            raise RejectedChange(change, f"cannot make its document: {exc!r}") from exc
        return Action(doc_id, doc, change.offset, change)

    def _fill_for(self, change: Change, layouts: dict[int, Layout],
                  evolutions: dict[TableId, Evolution]) -> _Fill | None:
        """The defaults the documents of the change's table take before it, if its schema
        version adds columns with one (followed on copies: ``write`` may be called again)."""
        evolution = evolutions.get(change.table)
        if evolution is None:
            evolution = copy.copy(self._pending_evolutions.get(change.table)
                                  or self._evolutions.get(change.table) or Evolution())
            evolutions[change.table] = evolution
        try:
            added = evolution.added(change.value_schema)
        except ValueError as exc:
            raise RejectedChange(change, str(exc)) from exc
        if not added:
            return None
        return _Fill(change.table, self._layout(change, layouts).columns(added))

    def _layout(self, change: Change, layouts: dict[int, Layout]) -> Layout:
        schema_id = change.value_schema_id if change.value_schema_id is not None else -1
        layout = (self._layouts.get(schema_id) or self._pending_layouts.get(schema_id)
                  or layouts.get(schema_id))
        if layout is None:
            layout = layouts[schema_id] = Layout.of(change.value_schema, self.flattened)
        return layout

    # -- sending --------------------------------------------------------------------------

    def _send(self, segment: dict[str, Action]) -> None:
        if not segment:
            return
        self._put_mappings()
        outcome = self.bulk.write(list(segment.values()))
        self.written += outcome.written
        self.stale += outcome.stale
        self.requests += outcome.requests
        if outcome.rejected:
            action, reason = outcome.rejected[0]
            for other, why in outcome.rejected[1:]:
                log.warning("%s: document %s refused too: %s", self.index, other.doc_id, why)
            raise RejectedChange(action.change, f"refused by {self.index}: {reason}")

    def _put_mappings(self) -> None:
        """Add the fields of the batch's new schema versions to the index's mapping (fields it
        has keep their mapping: a column whose type changed needs a reindex)."""
        for schema_id, layout in self._pending_layouts.items():
            if schema_id in self._put:
                continue
            new = {name: mapping for name, mapping in layout.properties.items()
                   if name not in self._mapped and name not in self._overridden}
            if new:
                try:
                    self.client.request("PUT", f"/{quote(self.index)}/_mapping",
                                        {"properties": new})
                except SearchError as exc:
                    raise SearchError(
                        f"cannot add fields {sorted(new)} to {self.index}: {exc}",
                        exc.status, exc.body,
                        hint="a field of that name has another type in this index (two "
                             "tables in one index?): map it in the mapping file, or give "
                             "the tables their own indices") from exc
                self._mapped |= set(new)
            self._put.add(schema_id)
            self._layouts[schema_id] = layout

    def _fill(self, fill: _Fill) -> None:
        """Give the documents of ``fill.table`` without a field its default: one
        ``_update_by_query`` per field, over the documents where it is absent or NULL (the
        script leaves those with a NULL as they are), each after a refresh so that it sees every
        document as written before (a stale one would be a version conflict)."""
        self._put_mappings()  # the field's own mapping, before a value could map it
        for column, value in fill.values.items():
            self.client.refresh(self.index)  # the last update's documents, as they are now
            body = {"query": {"bool": {"filter": [{"term": {TABLE_FIELD: str(fill.table)}}],
                                       "must_not": [{"exists": {"field": column}}]}},
                    "script": {"lang": "painless", "source": FILL_SCRIPT,
                               "params": {"field": column, "value": value}}}
            answer = self.client.request("POST", f"/{quote(self.index)}/_update_by_query",
                                         body)
            self.requests += 1
            if answer.get("failures") or answer.get("timed_out"):
                raise SearchError(
                    f"default of {column} for the documents of {fill.table} in {self.index} "
                    f"not applied: {answer.get('failures') or 'timed out'}", body=answer,
                    hint="run one reader per physical index; the restart applies it again")
            log.info("%s: %s of %s set to its default in %d documents", self.index, column,
                     fill.table, answer.get("updated", 0))

    def _truncate(self, table: TableId) -> None:
        """Delete every document of ``table``: a search of its ids with their versions (after
        a refresh, so that every written document is found), deleted by version, again until
        none is left."""
        query = {"query": {"term": {TABLE_FIELD: str(table)}}, "size": TRUNCATE_PAGE,
                 "_source": False, "version": True, "sort": ["_doc"]}
        while True:
            self.client.refresh(self.index)
            hits = self.client.request("POST", f"/{quote(self.index)}/_search",
                                       query)["hits"]["hits"]
            if not hits:
                return
            outcome = self.bulk.write([Action(h["_id"], None, h["_version"], None)
                                       for h in hits])
            if outcome.rejected:
                raise SearchError(f"truncate of {table} in {self.index}: "
                                  f"{outcome.rejected[0][1]}")
            if outcome.written == 0:
                raise SearchError(f"truncate of {table} in {self.index} deletes nothing: "
                                  "another process writes to the index",
                                  hint="run one reader per physical index")
            self.requests += outcome.requests

    def _current_fields(self) -> set[str]:
        answer = self.client.request("GET", f"/{quote(self.index)}/_mapping")
        for body in answer.values():
            return set(body.get("mappings", {}).get("properties", {}))
        return set()

    def _discard(self) -> None:
        self._pending = []
        self._pending_offsets = {}
        self._pending_layouts = {}
        self._pending_evolutions = {}
