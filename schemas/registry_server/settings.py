"""The registry server's settings (`bottler registry serve`, `python -m schemas.registry_server`),
on the one configuration system of common/config.py."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, SecretStr

from common.config import KafkaSettings, env

# Request bodies above this are refused before they are read (HTTP 413): a schema is a few kB,
# and a body is held in memory. Kafka's default max.message.bytes (1 MB) bounds a schema anyway.
MAX_REQUEST_BYTES = 1024 * 1024


class ServeSettings(KafkaSettings):
    host: str = Field("127.0.0.1", validation_alias=env("BOTTLER_REGISTRY_HOST"))
    port: int = Field(8081, ge=0, le=65535, validation_alias=env("BOTTLER_REGISTRY_PORT"))
    topic: str = Field("_schemas", validation_alias=env("BOTTLER_REGISTRY_TOPIC"))
    max_request_bytes: int = Field(MAX_REQUEST_BYTES, ge=1,
                                   validation_alias=env("BOTTLER_REGISTRY_MAX_REQUEST_BYTES"))
    users_file: Path | None = Field(None, validation_alias=env("BOTTLER_REGISTRY_USERS_FILE"))
    users: SecretStr | None = Field(None, validation_alias=env("BOTTLER_REGISTRY_USERS"))
