"""The search reindexer: an Elasticsearch/OpenSearch index kept live from the table topics,
rebuilt from offset zero behind a blue/green alias swap (see docs/search.md)."""

from common import lazy

__getattr__ = lazy.exports(__name__, {
    "SearchClient": "materializers.search.client",
    "SearchError": "materializers.search.client",
    "SearchSink": "materializers.search.sink",
})

__all__ = ["SearchClient", "SearchError", "SearchSink"]
