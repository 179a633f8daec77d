"""The search reindexer: an Elasticsearch/OpenSearch index kept live from the table topics,
rebuilt from offset zero behind a blue/green alias swap."""
