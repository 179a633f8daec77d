"""The search reindexer: an Elasticsearch/OpenSearch index kept live from the table topics,
rebuilt from offset zero behind a blue/green alias swap (see docs/search.md)."""

from materializers.search.client import SearchClient, SearchError
from materializers.search.sink import SearchSink

__all__ = ["SearchClient", "SearchError", "SearchSink"]
