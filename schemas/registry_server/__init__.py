"""The project's own schema registry server: Confluent's REST API subset, schemas kept in Kafka.
(The processes' client of any registry is :mod:`common.registry_client`.)

Run it with `python -m schemas.registry_server --kafka HOST:PORT`, or call `serve()`; embed the
ASGI app with `create_app(store)` after `SchemaStore(...).start()`. Its rooms: :mod:`.app` (the
ASGI app), :mod:`.api` (the endpoints' handlers), :mod:`.store` (the schemas in Kafka),
:mod:`.compatibility`, :mod:`.auth`, :mod:`.settings`, :mod:`.server`.
"""

from importlib import import_module

__all__ = ["SchemaStore", "StoreError", "create_app", "serve"]
_WHERE = {"SchemaStore": ".store", "StoreError": ".store", "create_app": ".app", "serve": ".server"}


def __getattr__(name: str):
    """Imported when used: the command line reads the registry's settings (.settings) without
    loading its web server."""
    if name in _WHERE:
        return getattr(import_module(_WHERE[name], __name__), name)
    raise AttributeError(name)
