"""The search API's client (the `client` fixture), and what the search tests ask of the API,
over bottler's own REST client (the official ``elasticsearch`` client refuses OpenSearch, the
embedded stack's engine)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import pytest

from materializers.search.client import SearchClient


@pytest.fixture
def client(stack) -> SearchClient:
    """A client of the stack's search API."""
    return SearchClient(stack.search_url)


def hits(client: SearchClient, index: str, query: dict[str, Any] | None = None,
         **body: Any) -> list[dict]:
    """The hits of a search of ``index`` (all documents by default), after a refresh."""
    client.refresh(index)
    answer = client.request("POST", f"/{quote(index)}/_search",
                            {"query": query or {"match_all": {}}, **body})
    return answer["hits"]["hits"]


def count(client: SearchClient, index: str) -> int:
    client.refresh(index)
    return client.request("GET", f"/{quote(index)}/_count")["count"]


def named(client: SearchClient, pattern: str) -> list[str]:
    """The indices whose names match ``pattern`` (wildcards allowed), sorted."""
    answer = client.request("GET", f"/{quote(pattern, safe='*')}/_settings/index.uuid",
                            params={"ignore_unavailable": True, "allow_no_indices": True},
                            ok=(404,))
    return sorted(name for name in answer if name != "status" and name != "error")


def aliased(client: SearchClient, alias: str) -> list[str]:
    """The indices ``alias`` points at (none if there is no such alias)."""
    answer = client.request("GET", f"/_alias/{quote(alias)}", ok=(404,))
    return [] if answer.get("status") == 404 else sorted(answer)


def create(client: SearchClient, index: str, body: dict[str, Any] | None = None) -> None:
    client.request("PUT", f"/{quote(index)}", body or {})


def put_alias(client: SearchClient, index: str, alias: str) -> None:
    client.request("PUT", f"/{quote(index)}/_alias/{quote(alias)}")


def put(client: SearchClient, index: str, doc_id: str, document: dict[str, Any]) -> None:
    client.request("PUT", f"/{quote(index)}/_doc/{quote(doc_id, safe='')}", document,
                   params={"refresh": True})
