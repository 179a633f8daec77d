"""Run the registry: replay the schema topic, then serve HTTP with uvicorn."""

import logging

import uvicorn

from common.errors import BottlerError
from common.kafka import check_broker, described

from .app import create_app
from .auth import load_users
from .settings import ServeSettings
from .store import SchemaStore, StoreError

log = logging.getLogger("schemas.registry_server")
BROKER_WAIT = 60.0  # seconds


def serve(settings: ServeSettings) -> None:
    """Serve the registry until interrupted. Raises BottlerError if Kafka cannot be used."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    s = settings
    users = load_users(s.users_file, s.users.get_secret_value() if s.users else None)
    # A wrong property fails here, in one line; a broker that is down (restarting beside us) is
    # waited for as long as Confluent's registry waits (kafkastore.init.timeout.ms, 60 s).
    check_broker(s.kafka, timeout=BROKER_WAIT)
    store = SchemaStore(s.kafka, s.topic)
    try:
        store.start()  # before listening: a registry that answers must know every schema
    except StoreError as exc:  # one line, as every command's start-up errors
        raise BottlerError(f"the schema registry cannot start: {exc}") from None
    try:
        log.info(
            "schema registry serving http://%s:%d (schemas in topic %s on %s; %s)",
            s.host, s.port, s.topic, described(s.kafka),
            f"basic authentication, {len(users)} users" if users else "no authentication",
        )
        uvicorn.run(create_app(store, s.max_request_bytes, users), host=s.host, port=s.port,
                    log_level="warning")
    finally:
        store.close()
