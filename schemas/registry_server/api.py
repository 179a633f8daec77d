"""The API's handlers: Confluent Schema Registry's endpoints over the :class:`~.store.SchemaStore`,
with Confluent's error codes, and the checks of what a request asks for."""

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from starlette.datastructures import QueryParams
from starlette.responses import Response

from . import compatibility as compat
from .store import SchemaStore, Version, canonical

MEDIA_TYPE = "application/vnd.schemaregistry.v1+json"

log = logging.getLogger(__name__)


class ApiError(Exception):
    def __init__(self, status: int, code: int, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message



@dataclass
class Call:
    """What a handler needs from a request, read before it leaves the event loop."""

    path: dict[str, str]
    query: QueryParams
    body: dict

    def flag(self, name: str) -> bool:
        # The Python client sends Python's spelling (True/False) in some query strings.
        return self.query.get(name, "false").lower() == "true"


def _no_subject_config(subject: str) -> ApiError:
    return ApiError(
        404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured"
    )


def _version_number(raw: str) -> int | None:
    """A version from a URL: a positive number, or None for the latest ("latest" or -1)."""
    if raw in ("latest", "-1"):
        return None
    if raw.isascii() and raw.isdigit() and int(raw) > 0:
        return int(raw)
    raise ApiError(
        422, 42202,
        f"The specified version '{raw}' is not a valid version id. Allowed values are between "
        "[1, 2^31-1] and the string \"latest\"",
    )


def _schema_from(body: dict) -> str:
    """The request's schema text, checked to be a valid Avro schema this registry supports."""
    schema_type = body.get("schemaType") or "AVRO"
    if schema_type != "AVRO":
        raise ApiError(
            422, 42201, f"Schema type {schema_type} is not supported: this registry serves AVRO"
        )
    if body.get("references"):
        raise ApiError(422, 42201, "Schema references are not supported by this registry")
    text = body.get("schema")
    if not isinstance(text, str):
        raise ApiError(422, 42201, "Invalid schema: the request has no \"schema\" string")
    try:
        compat.parse(text)
    except compat.InvalidSchema as exc:
        raise ApiError(422, 42201, str(exc)) from exc
    return text


def _level_from(body: dict) -> str:
    level = body.get("compatibility") or body.get("compatibilityLevel")
    if not isinstance(level, str) or level.upper() not in compat.LEVELS:
        raise ApiError(
            422, 42203,
            f"Invalid compatibility level {level!r}. Valid values are: {', '.join(compat.LEVELS)}",
        )
    return level.upper()


class SchemaApi:
    """The endpoint handlers. They run one at a time (see run), so check-then-write sequences
    such as "is this schema new? then give it the next id" cannot interleave."""

    def __init__(self, store: SchemaStore):
        self.store = store
        self.lock = threading.Lock()

    def run(self, handler: Callable[[Call], object], call: Call, method: str) -> object:
        with self.lock:
            if method not in ("GET", "HEAD"):
                self.store.sync()  # may write: first catch up after an earlier failed write
            return handler(call)

    # -- helpers -----------------------------------------------------------------------------

    def _versions(self, subject: str, include_deleted: bool) -> list[Version]:
        found = [v for v in self.store.versions(subject) if include_deleted or not v.deleted]
        if not found:
            raise ApiError(404, 40401, f"Subject '{subject}' not found.")
        return found

    def _live(self, subject: str) -> list[Version]:
        return [v for v in self.store.versions(subject) if not v.deleted]

    def _resolve(self, subject: str, number: int | None, include_deleted: bool) -> Version:
        versions = self._versions(subject, include_deleted)
        if number is None:
            return versions[-1]
        for v in versions:
            if v.version == number:
                return v
        raise ApiError(404, 40402, f"Version {number} not found.")

    def _level(self, subject: str | None) -> str:
        return self.store.config(subject) or self.store.config(None) or compat.DEFAULT_LEVEL

    def _problems(self, level: str, text: str, against: list[Version]) -> list[str]:
        existing = [(v.version, compat.parse(v.schema)) for v in against]
        return compat.check(level, compat.parse(text), existing)

    @staticmethod
    def _describe(v: Version) -> dict:
        return {"subject": v.subject, "version": v.version, "id": v.id, "schema": v.schema}

    # -- subjects and versions ---------------------------------------------------------------

    def root(self, call: Call) -> dict:
        return {}

    def schema_types(self, call: Call) -> list[str]:
        return ["AVRO"]

    def list_subjects(self, call: Call) -> list[str]:
        prefix = call.query.get("subjectPrefix", "")
        only_deleted, with_deleted = call.flag("deleted_only"), call.flag("deleted")
        names = []
        for subject in self.store.subjects():
            live = bool(self._live(subject))
            if subject.startswith(prefix) and (
                (not live) if only_deleted else (live or with_deleted)
            ):
                names.append(subject)
        return names

    def list_versions(self, call: Call) -> list[int]:
        return [v.version for v in self._versions(call.path["subject"], call.flag("deleted"))]

    def get_version(self, call: Call) -> dict:
        number = _version_number(call.path["version"])
        return self._describe(self._resolve(call.path["subject"], number, call.flag("deleted")))

    def get_version_schema(self, call: Call) -> Response:
        number = _version_number(call.path["version"])
        v = self._resolve(call.path["subject"], number, call.flag("deleted"))
        return Response(v.schema, media_type=MEDIA_TYPE)

    def register(self, call: Call) -> dict:
        subject, text = call.path["subject"], _schema_from(call.body)
        live = self._live(subject)
        wanted = canonical(text)
        for v in live:
            if v.canonical == wanted:
                return {"id": v.id}
        level = self._level(subject)
        problems = self._problems(level, text, live)
        if problems:
            raise ApiError(
                409, 409,
                f"Schema being registered is incompatible with an earlier schema for subject "
                f"'{subject}' (compatibility level {level}): " + " | ".join(problems),
            )
        schema_id = self.store.id_for(text)
        if schema_id is None:
            schema_id = self.store.next_id()
        # Soft-deleted versions keep their numbers, so a new version never takes one of theirs.
        number = max((v.version for v in self.store.versions(subject)), default=0) + 1
        stored = json.dumps(json.loads(text), separators=(",", ":"))
        self.store.put_version(Version(subject, number, schema_id, stored))
        log.info("registered %s version %d as id %d", subject, number, schema_id)
        return {"id": schema_id}

    def lookup(self, call: Call) -> dict:
        subject, text = call.path["subject"], _schema_from(call.body)
        wanted = canonical(text)
        matches = [
            v for v in self._versions(subject, call.flag("deleted")) if v.canonical == wanted
        ]
        if not matches:
            raise ApiError(404, 40403, "Schema not found")
        return self._describe(matches[-1])

    def delete_subject(self, call: Call) -> list[int]:
        subject = call.path["subject"]
        versions = self._versions(subject, include_deleted=True)
        live = [v for v in versions if not v.deleted]
        if call.flag("permanent"):
            if live:
                raise ApiError(
                    404, 40405,
                    f"Subject '{subject}' was not deleted first before being permanently deleted",
                )
            for v in versions:
                self.store.drop_version(subject, v.version)
            if self.store.config(subject) is not None:
                self.store.drop_config(subject)
            return [v.version for v in versions]
        if not live:
            raise ApiError(
                404, 40404,
                f"Subject '{subject}' was soft deleted. Set permanent=true to delete permanently",
            )
        for v in live:
            self.store.put_version(replace(v, deleted=True))
        return [v.version for v in live]

    def delete_version(self, call: Call) -> int:
        subject, permanent = call.path["subject"], call.flag("permanent")
        number = _version_number(call.path["version"])
        # "latest" means the latest live version for a soft delete; a numbered one may be
        # soft-deleted already, which deserves its own error rather than "not found".
        v = self._resolve(subject, number, include_deleted=permanent or number is not None)
        if permanent and not v.deleted:
            raise ApiError(
                404, 40407,
                f"Subject '{subject}' Version {v.version} was not deleted first before being "
                "permanently deleted",
            )
        if not permanent and v.deleted:
            raise ApiError(
                404, 40406,
                f"Subject '{subject}' Version {v.version} was soft deleted. "
                "Set permanent=true to delete permanently",
            )
        if permanent:
            self.store.drop_version(subject, v.version)
        else:
            self.store.put_version(replace(v, deleted=True))
        return v.version

    # -- schemas by id -----------------------------------------------------------------------

    def _by_id(self, call: Call) -> list[Version]:
        schema_id = call.path["id"]
        found = self.store.by_id(schema_id)
        if not found:
            raise ApiError(404, 40403, f"Schema {schema_id} not found")
        return found

    def get_schema(self, call: Call) -> dict:
        # Query parameters such as subject= only narrow a lookup that is already unique.
        return {"schema": self._by_id(call)[0].schema}

    def schema_versions(self, call: Call) -> list[dict]:
        found = self._by_id(call)
        return [
            {"subject": v.subject, "version": v.version}
            for v in found
            if call.flag("deleted") or not v.deleted
        ]

    def schema_subjects(self, call: Call) -> list[str]:
        found = self._by_id(call)
        return sorted({v.subject for v in found if call.flag("deleted") or not v.deleted})

    # -- compatibility -----------------------------------------------------------------------

    def _verdict(self, call: Call, problems: list[str]) -> dict:
        verdict: dict = {"is_compatible": not problems}
        if call.flag("verbose"):
            verdict["messages"] = problems
        return verdict

    def test_version(self, call: Call) -> dict:
        subject, text = call.path["subject"], _schema_from(call.body)
        number = _version_number(call.path["version"])
        v = self._resolve(subject, number, include_deleted=False)
        return self._verdict(call, self._problems(self._level(subject), text, [v]))

    def test_all(self, call: Call) -> dict:
        subject, text = call.path["subject"], _schema_from(call.body)
        return self._verdict(call, self._problems(self._level(subject), text, self._live(subject)))

    # -- configuration -----------------------------------------------------------------------

    def get_global_config(self, call: Call) -> dict:
        return {"compatibilityLevel": self._level(None)}

    def put_config(self, call: Call) -> dict:
        level = _level_from(call.body)
        self.store.put_config(call.path.get("subject"), level)
        return {"compatibility": level}

    def get_subject_config(self, call: Call) -> dict:
        subject = call.path["subject"]
        level = self.store.config(subject)
        if level is None and not call.flag("defaultToGlobal"):
            raise _no_subject_config(subject)
        return {"compatibilityLevel": level or self._level(None)}

    def delete_config(self, call: Call) -> dict:
        subject = call.path.get("subject")
        previous = self._level(subject)
        if self.store.config(subject) is not None:
            self.store.drop_config(subject)
        elif subject is not None:
            raise _no_subject_config(subject)
        return {"compatibilityLevel": previous}


# The registry's only mode: it takes writes. Confluent's READONLY and IMPORT are not served
# (a mode change is refused with Confluent's "invalid mode" error).
MODE = "READWRITE"


def _mode_from(body: dict) -> str:
    mode = body.get("mode")
    if not isinstance(mode, str) or mode.upper() != MODE:
        raise ApiError(422, 42204, f"Invalid mode {mode!r}: this registry serves {MODE} only")
    return MODE


class Modes:
    """`/mode` and `/contexts` as Confluent's registry answers them (confluent-kafka's client
    asks for the mode); one mode, READWRITE, and the default context only."""

    def get_mode(self, call: Call) -> dict:
        if "subject" in call.path and not call.flag("defaultToGlobal"):
            subject = call.path["subject"]
            raise ApiError(404, 40409,
                           f"Subject '{subject}' does not have subject-level mode configured")
        return {"mode": MODE}

    def put_mode(self, call: Call) -> dict:
        return {"mode": _mode_from(call.body)}

    def delete_mode(self, call: Call) -> dict:
        subject = call.path["subject"]
        raise ApiError(404, 40409,
                       f"Subject '{subject}' does not have subject-level mode configured")

    def contexts(self, call: Call) -> list[str]:
        return ["."]

