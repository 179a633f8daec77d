"""Run the registry: replay the schema topic, then serve HTTP with uvicorn."""

import logging

import uvicorn

from .app import MAX_REQUEST_BYTES, create_app
from .store import SchemaStore

log = logging.getLogger("schemas.registry")


def serve(host: str, port: int, bootstrap: str, topic: str = "_schemas",
          max_request_bytes: int = MAX_REQUEST_BYTES) -> None:
    """Serve the registry until interrupted. Raises StoreError if Kafka cannot be used."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    store = SchemaStore(bootstrap, topic)
    store.start()  # before listening: a registry that answers must know every schema
    try:
        log.info(
            "schema registry serving http://%s:%d (schemas in topic %s on %s)",
            host, port, topic, bootstrap,
        )
        uvicorn.run(create_app(store, max_request_bytes), host=host, port=port, log_level="warning")
    finally:
        store.close()
