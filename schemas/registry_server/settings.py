"""The registry server's settings (`bottler registry serve`, `python -m schemas.registry_server`),
on the one configuration system of common/config.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, SecretStr

from common.config import BROKER, KAFKA_CONFIG, KafkaSettings, env
from common.flags import Flag

# Request bodies above this are refused before they are read (HTTP 413): a schema is a few kB,
# and a body is held in memory. Kafka's default max.message.bytes (1 MB) bounds a schema anyway.
MAX_REQUEST_BYTES = 1024 * 1024


class ServeSettings(KafkaSettings):
    host: Annotated[str, Flag("--host", help="Address to listen on (0.0.0.0: every interface)",
                              )] = Field("127.0.0.1", validation_alias=env("BOTTLER_REGISTRY_HOST"))
    port: Annotated[int, Flag("--port", help="Port to listen on")] = Field(
        8081, ge=0, le=65535, validation_alias=env("BOTTLER_REGISTRY_PORT"))
    kafka: Annotated[dict[str, str], BROKER.but("--broker", "--kafka", "-b"), KAFKA_CONFIG] = (
        Field(default_factory=dict))
    topic: Annotated[str, Flag("--topic", help="Compacted topic that stores the schemas")] = (
        Field("_schemas", validation_alias=env("BOTTLER_REGISTRY_TOPIC")))
    max_request_bytes: Annotated[int, Flag(
        "--max-request-bytes", help="Larger request bodies are refused (HTTP 413)")] = Field(
        MAX_REQUEST_BYTES, ge=1, validation_alias=env("BOTTLER_REGISTRY_MAX_REQUEST_BYTES"))
    users_file: Annotated[Path | None, Flag(
        "--users-file", help="File of user:password lines: every request needs one's "
        "credentials (HTTP basic); or the lines themselves in BOTTLER_REGISTRY_USERS")] = Field(
        None, validation_alias=env("BOTTLER_REGISTRY_USERS_FILE"))
    users: SecretStr | None = Field(None, validation_alias=env("BOTTLER_REGISTRY_USERS"))
