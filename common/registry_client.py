"""The schema registry client every process makes from its settings' `schema_registry`
properties (confluent-kafka's SchemaRegistryClient configuration: url, basic.auth.user.info,
ssl.ca.location...), and the check it makes before it starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from common.errors import BottlerError
from common.redact import redact

# Where a process finds the registry: its URL, its client's properties, or a client.
Registry = Any  # str | Mapping[str, str] | SchemaRegistryClient


def registry_client(registry: Registry):
    """A SchemaRegistryClient for a URL or a mapping of client properties; a client as is."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    if isinstance(registry, str):
        return SchemaRegistryClient({"url": registry})
    if isinstance(registry, Mapping):
        return SchemaRegistryClient(dict(registry))
    return registry


def registry_url(registry: Registry) -> str:
    """The registry's URL, fit to show."""
    if isinstance(registry, str):
        return redact(registry)
    if isinstance(registry, Mapping):
        return redact(str(registry.get("url", "")))
    return "the given registry client"


def registry_error() -> type[Exception]:
    """The client's error class, imported when an error is to be told (``except
    registry_error() as exc``): the client's package takes 0.13 s to import."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    return SchemaRegistryError


def check_registry(registry: Registry, client=None) -> None:
    """Fail in one line when the registry is unreachable or refuses the credentials; asks
    ``client`` when given (a client costs 0.06 s to make: its TLS context), else a new one."""
    client = client if client is not None else registry_client(registry)
    where = registry_url(registry)
    try:
        client.get_subjects()
    except registry_error() as exc:
        if exc.http_status_code in (401, 403):
            raise BottlerError(
                f"the schema registry at {where} refused the credentials "
                f"(HTTP {exc.http_status_code}: {redact(str(exc.error_message))})",
                "check basic.auth.user.info (-R, BOTTLER_REGISTRY_CONFIG, the "
                "`schema_registry:` section of the --config file)") from None
        raise BottlerError(
            f"the schema registry at {where} answered HTTP {exc.http_status_code}: "
            f"{redact(str(exc.error_message))}",
            "check --schema-registry (BOTTLER_REGISTRY)") from None
    except Exception as exc:  # the client raises httpx's errors as they are
        raise BottlerError(
            f"the schema registry at {where} is unreachable: {redact(str(exc))}",
            "check --schema-registry (BOTTLER_REGISTRY), the registry client properties "
            "(-R, BOTTLER_REGISTRY_CONFIG) and that the registry is up") from None
