"""Registering schemas with the schema registry, once each."""

from __future__ import annotations

import json
import logging
from functools import cached_property

from common.errors import BottlerError
from common.redact import redact
from common.registry_client import (
    Registry,
    check_registry,
    registry_client,
    registry_error,
    registry_url,
)

log = logging.getLogger(__name__)


class Registrar:
    """Registers schemas, once each; an incompatible change is registered anyway, with a warning
    (the table changed: refusing would stop the capture, not the change)."""

    def __init__(self, registry: Registry):
        """``registry``: its URL, or the registry client's properties (url included)."""
        self.registry = registry
        self._ids: dict[tuple[str, str], int] = {}
        self._known: set[str] = set()  # subjects seen to exist
        self.created: list[str] = []  # subjects this registrar made (a failed start's undo)

    @cached_property
    def client(self):
        """Made at its first use: confluent-kafka's registry client takes 0.13 s to import,
        which the capture's start pays in its check's thread (capture/run.py), not before."""
        return registry_client(self.registry)

    def check(self) -> None:
        check_registry(self.registry, self.client)

    def register(self, subject: str, schema: dict) -> int:
        text = json.dumps(schema, separators=(",", ":"))
        if (subject, text) in self._ids:
            return self._ids[(subject, text)]
        try:
            new = subject not in self._known and not self._exists(subject)
            schema_id = self.client.register_schema(subject, _avro(text))
            if new:
                self.created.append(subject)
            self._known.add(subject)
        except registry_error() as exc:
            if exc.http_status_code != 409:
                raise BottlerError(
                    f"the schema registry refused the schema of {subject}: {exc.error_message}"
                ) from None
            schema_id = self._register_incompatible(subject, text, exc.error_message)
        except Exception as exc:
            raise BottlerError(
                f"cannot register {subject} with the schema registry at "
                f"{registry_url(self.registry)}: "
                f"{redact(str(exc))}",
                "check that the registry is up; capture resumes where it stopped",
            ) from None
        self._ids[(subject, text)] = schema_id
        return schema_id

    def latest(self, subject: str) -> dict | None:
        """The subject's latest schema, or None when it has none (or the registry cannot say:
        then the capture goes on as for a new table)."""
        try:
            return json.loads(self.client.get_latest_version(subject).schema.schema_str)
        except registry_error() as exc:
            if exc.http_status_code != 404:
                log.warning("cannot read the latest schema of %s: %s", subject,
                            exc.error_message)
            return None
        except Exception as exc:  # noqa: BLE001 - registry down: the next register says so
            log.warning("cannot read the latest schema of %s: %s", subject, redact(str(exc)))
            return None

    def _exists(self, subject: str) -> bool:
        try:
            self.client.get_versions(subject)
        except registry_error() as exc:
            if exc.http_status_code == 404:
                return False
            raise
        return True

    def delete_created(self) -> None:
        """Delete the subjects this registrar made (soft, then permanently), so a failed start
        leaves none behind; those that existed before are never touched."""
        while self.created:
            subject = self.created.pop()
            self.client.delete_subject(subject)
            self.client.delete_subject(subject, permanent=True)
            self._known.discard(subject)
            self._ids = {k: v for k, v in self._ids.items() if k[0] != subject}

    def _register_incompatible(self, subject: str, text: str, reason: str) -> int:
        log.warning("%s: the new schema is not compatible with the previous version (%s); "
                    "registering it as a new version with compatibility NONE", subject, reason)
        previous = self._own_level(subject)
        self.client.set_compatibility(subject, "NONE")
        try:
            return self.client.register_schema(subject, _avro(text))
        finally:
            if previous:
                self.client.set_compatibility(subject, previous)
            else:
                # Apicurio keeps a subject's level NONE when asked to delete it: one it deletes
                # first takes another (Confluent's registry and ours delete either)
                self.client.set_compatibility(subject, "BACKWARD")
                self.client.delete_config(subject)

    def _own_level(self, subject: str) -> str | None:
        """The level of its own of a subject that just refused a schema; None when it follows
        the global one. Confluent's registry and ours answer 404 for a subject without one;
        Apicurio answers NONE (its default, whatever the global level): a subject of its own
        NONE would have taken the schema (docs/operations.md, "Another schema registry")."""
        try:
            level = self.client.get_compatibility(subject)
        except registry_error():
            return None
        return None if level == "NONE" else level


def _avro(text: str):
    from confluent_kafka.schema_registry import Schema

    return Schema(text, "AVRO")
