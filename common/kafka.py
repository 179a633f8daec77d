"""Consumer settings every reader of a topic's backlog shares."""

# librdkafka refuses a fetch response larger than receive.message.max.bytes (100 MB by
# default) and asks again, for ever. Kafka keeps a response within fetch.max.bytes (50 MB by
# default); the embedded broker (noida-db) answers with everything after the offset asked, so
# reading a backlog of more than 100 MB from it (a rebuild of 1.4M rows of ~100 B, say) would
# never start. Reading it takes memory in proportion (about 0.5 KB per message waiting).
BACKLOG_READER = {"receive.message.max.bytes": 1 << 30}
