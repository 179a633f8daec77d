"""The conformance suite's adapter for the search materializer (see tests/test_conformance.py):
a SearchSink on a fresh physical index of the stack's search API, read back through searches."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

from materializers.core import TableId
from materializers.search import indices
from materializers.search.client import SearchClient
from materializers.search.documents import TABLE_FIELD
from materializers.search.sink import SearchSink
from tests.support.conformance import Adapter


def documents(sink: SearchSink, table: TableId) -> list[dict[str, Any]]:
    """The ``_source`` of every document of ``table``, as searches see them after a refresh."""
    client = sink.client
    client.refresh(sink.index)
    answer = client.request("POST", f"/{sink.index}/_search", {
        "query": {"term": {TABLE_FIELD: str(table)}}, "size": 10_000})
    return [hit["_source"] for hit in answer["hits"]["hits"]]


def python_row(sink: SearchSink, source: dict[str, Any], columns: Sequence[str]) -> tuple:
    """A document's columns as the Python values the decoded rows had: decimals back from
    their JSON number (``scaled_float``: at most 15 digits, exact through a double) or their
    exact text (wider decimals, mapped ``double``)."""
    mapping = sink.client.request("GET", f"/{sink.index}/_mapping")[sink.index]["mappings"]
    types = {name: m.get("type") for name, m in mapping.get("properties", {}).items()}
    row = []
    for column in columns:
        value = source.get(column)
        kind = types.get(column)
        if (kind == "scaled_float" and isinstance(value, float | int)) or (
                kind == "double" and isinstance(value, str)):
            value = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
        row.append(value)
    return tuple(row)


def adapter(request, cleanup):
    stack = request.getfixturevalue("stack")
    client = SearchClient(stack.search_url)
    made: list[str] = []

    def make(index: str | None = None, group: str | None = None) -> SearchSink:
        index = index or f"conformance-{uuid.uuid4().hex[:8]}"
        made.append(index)
        return SearchSink(client, index, group_id=group)

    def reopen(old: SearchSink) -> SearchSink:
        old.close()  # the process died: what it had not flushed is gone with it
        return make(old.index, old.group_id)

    def keyed(sink: SearchSink, table: TableId, columns: Sequence[str]) -> dict:
        rows = [python_row(sink, doc, columns) for doc in documents(sink, table)]
        return {(row[0],): row for row in rows}

    def unkeyed(sink: SearchSink, table: TableId, columns: Sequence[str]) -> list:
        return sorted(python_row(sink, doc, columns) for doc in documents(sink, table))

    def drop() -> None:
        for index in set(made):
            indices.delete_index(client, index)

    cleanup.callback(drop)
    return Adapter(make, reopen, keyed, unkeyed)
