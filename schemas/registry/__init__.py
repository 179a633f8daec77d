"""The project's own schema registry: Confluent's REST API subset, schemas kept in Kafka.

Run it with `python -m schemas.registry --kafka HOST:PORT`, or call `serve()`; embed the ASGI
app with `create_app(store)` after `SchemaStore(...).start()`.
"""

from .app import create_app
from .server import serve
from .store import SchemaStore, StoreError

__all__ = ["SchemaStore", "StoreError", "create_app", "serve"]
