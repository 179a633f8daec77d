"""Physical indices behind an alias, and the offsets kept for each.

The alias ``NAME`` is what searches use; it points to one physical index ``NAME-<n>`` (``n`` =
1, 2…, one more for every rebuild). Each physical index has its offsets document in the
``bottler-offsets`` index (hidden): ``_id`` = the physical index's name, with the index's uuid
(so a deleted and re-created index of the same name starts from offset 0), the next offset per
topic-partition as of the last successful flush, and whether its reader released it (handed
over to a newer index).

**Only its own indices.** bottler writes into, points its alias at, and deletes only the physical
indices it created and can prove it did: its mark in the index's mapping (``_meta.bottler``, set
when it creates one), or, for indices of versions before the mark, an offsets document of the
index's uuid. Any other index (a user's index an alias points to, or one named ``NAME-<n>``) is
refused with one line (:func:`require_own`).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from common.errors import BottlerError
from common.files import read_text
from materializers.core.changes import TopicPartition
from materializers.search.client import SearchClient, SearchError
from materializers.search.documents import TABLE_FIELD

OFFSETS_INDEX = "bottler-offsets"
MARK = "bottler"  # the key of bottler's mark in a physical index's mapping ``_meta``
OFFSETS_MAPPING = {
    "dynamic": False,
    "properties": {
        "index": {"type": "keyword"}, "index_uuid": {"type": "keyword"},
        "alias": {"type": "keyword"}, "updated_at": {"type": "date"},
        "released": {"type": "boolean"}, "offsets": {"type": "object", "enabled": False},
    },
}


# -- index definitions (the mapping file) ---------------------------------------------------


def load_definition(path: Path | None) -> dict[str, Any]:
    """The mapping file: an index-creation body, ``{"settings": {…}, "mappings": {"properties":
    {…}, "dynamic": …}}`` (or just ``{"properties": {…}}``). Its properties win over the
    mapping derived from the Avro schemas, field by field; its settings apply when a physical
    index is created."""
    if path is None:
        return {}
    example = "give a JSON file like {\"mappings\": {\"properties\": {…}}}"
    text = read_text(Path(path), "the mapping file", example)
    try:
        body = json.loads(text)
    except ValueError as exc:
        raise BottlerError(f"the mapping file {path} is not valid JSON: {exc}", example) from None
    if not isinstance(body, dict):
        raise BottlerError(f"the mapping file {path} is not a JSON object")
    if "properties" in body and "mappings" not in body:
        body = {"mappings": body}
    unknown = set(body) - {"settings", "mappings"}
    if unknown:
        raise BottlerError(f"the mapping file {path} has unknown keys {sorted(unknown)}",
                           "only settings and mappings")
    return body


def create_index(client: SearchClient, name: str, definition: dict[str, Any]) -> None:
    """Create the physical index ``name`` with the definition's settings and mappings, plus the
    table field. The columns' fields are added as their tables appear (SearchSink)."""
    mappings = dict(definition.get("mappings", {}))
    mappings["properties"] = {TABLE_FIELD: {"type": "keyword"}, **mappings.get("properties", {})}
    mappings["_meta"] = {**mappings.get("_meta", {}), MARK: {"created_by": "bottler"}}
    body = {"mappings": mappings}
    if definition.get("settings"):
        body["settings"] = definition["settings"]
    try:
        client.request("PUT", f"/{quote(name)}", body)
    except SearchError as exc:
        if exc.error_type not in REFUSED_DEFINITION:
            raise
        raise SearchError(f"the search engine refuses the definition of {name}: "
                          f"{exc.body['error'].get('reason')}", exc.status, exc.body,
                          hint="fix the mapping file (--mapping), or the transform that sets "
                               "those fields") from None


# the errors of an index creation refused for its settings or mappings (not a taken name)
REFUSED_DEFINITION = frozenset({"mapper_parsing_exception", "illegal_argument_exception",
                                "settings_exception", "x_content_parse_exception"})


def pause_refresh(client: SearchClient, name: str) -> Any:
    """Stop the periodic refresh of ``name`` (a rebuild's index, which nothing searches yet:
    each refresh would cost it a small segment); returns its setting to give back to
    :func:`resume_refresh` (None: the engine's default)."""
    answer = client.request("GET", f"/{quote(name)}/_settings/index.refresh_interval")
    previous = None
    for body in answer.values():
        previous = body.get("settings", {}).get("index", {}).get("refresh_interval")
    client.request("PUT", f"/{quote(name)}/_settings", {"index": {"refresh_interval": "-1"}})
    return previous


def resume_refresh(client: SearchClient, name: str, previous: Any) -> None:
    """Give ``name`` back the refresh interval :func:`pause_refresh` took, and refresh it."""
    client.request("PUT", f"/{quote(name)}/_settings", {"index": {"refresh_interval": previous}})
    client.refresh(name)


def created_by_bottler(client: SearchClient, name: str) -> bool:
    """Whether bottler created the physical index ``name``: its mark in the mapping's
    ``_meta``, or (an index of a version before the mark) an offsets document of its uuid."""
    answer = client.request("GET", f"/{quote(name)}/_mapping", ok=(404,))
    for index in answer.values():
        meta = index.get("mappings", {}).get("_meta") if isinstance(index, dict) else None
        if isinstance(meta, dict) and MARK in meta:
            return True
    uuid = client.index_uuid(name)
    doc = OffsetStore(client).get(name) if uuid else None
    return doc is not None and doc.get("index_uuid") == uuid


def require_own(client: SearchClient, name: str, alias: str | None = None) -> None:
    """Refuse, with one line, the physical index ``name`` if bottler did not create it."""
    if created_by_bottler(client, name):
        return
    reached = f"the alias {alias} points to search index {name}, which" if alias and alias != name \
        else f"search index {name}"
    fix = (f"point the alias elsewhere or remove it (POST /_aliases with a remove action for "
           f"{name}), or give --index another name" if alias and alias != name
           else f"rename or delete {name} yourself, or give --index another name")
    raise BottlerError(f"{reached} was not created by bottler (no bottler mark in its mapping, "
                       "no offsets document of it): bottler neither writes into nor deletes it",
                       fix)


# -- aliases and versions -----------------------------------------------------------------


def physical_name(alias: str, version: int) -> str:
    return f"{alias}-{version}"


def versions(client: SearchClient, alias: str) -> dict[str, int]:
    """The physical indices of ``alias`` that exist, ``name -> version``."""
    answer = client.request("GET", f"/{quote(alias)}-*/_alias", ok=(404,))
    pattern = re.compile(re.escape(alias) + r"-(\d+)")
    found = {}
    for name in answer:
        match = pattern.fullmatch(name)
        if match:
            found[name] = int(match.group(1))
    return found


def alias_target(client: SearchClient, alias: str) -> str | None:
    """The physical index ``alias`` points to, or None if there is no such alias. An index
    named like the alias (not an alias) is an error: the blue/green swap needs the alias."""
    answer = client.request("GET", f"/_alias/{quote(alias)}", ok=(404,))
    indices = [name for name in answer if name not in ("status", "error")]
    if not indices:
        if client.exists(alias):
            raise BottlerError(
                f"{alias} is an index, not an alias",
                f"reindex it under another name, or delete it; bottler serves {alias} as an "
                f"alias of {alias}-1, {alias}-2…")
        return None
    if len(indices) > 1:
        raise BottlerError(f"the alias {alias} points to several indices: {sorted(indices)}",
                           "keep one: POST /_aliases with remove actions")
    return indices[0]


def next_version(client: SearchClient, alias: str) -> int:
    return max(versions(client, alias).values(), default=0) + 1


def ensure_alias(client: SearchClient, alias: str, definition: dict[str, Any]) -> str:
    """The physical index behind ``alias``; without one, ``alias-1`` is created (or an existing
    newest version taken) and the alias pointed at it. Only an index bottler created
    (:func:`require_own`)."""
    target = alias_target(client, alias)
    if target is not None:
        require_own(client, target, alias)
        return target
    existing = versions(client, alias)
    if existing:
        target = max(existing, key=existing.get)
    else:
        target = physical_name(alias, 1)
        try:
            create_index(client, target, definition)
        except SearchError as exc:
            if exc.error_type != "resource_already_exists_exception":
                raise
    require_own(client, target)  # another reader's, created at once: ours; a user's: refused
    client.request("POST", "/_aliases", {"actions": [{"add": {"index": target, "alias": alias}}]})
    return target


def swap(client: SearchClient, alias: str, old: str | None, new: str) -> None:
    """Point ``alias`` from ``old`` to ``new`` in one ``_aliases`` call (atomic: every search
    sees one or the other)."""
    actions: list[dict[str, Any]] = []
    if old is not None:
        actions.append({"remove": {"index": old, "alias": alias}})
    actions.append({"add": {"index": new, "alias": alias}})
    client.request("POST", "/_aliases", {"actions": actions})


def delete_index(client: SearchClient, name: str) -> None:
    """Delete the physical index ``name`` and its offsets: only one bottler created."""
    if client.index_uuid(name) is not None:
        require_own(client, name)
    client.request("DELETE", f"/{quote(name)}", ok=(404,))
    OffsetStore(client).delete(name)


# -- offsets ------------------------------------------------------------------------------


class OffsetStore:
    """The ``bottler-offsets`` documents (created on first use)."""

    def __init__(self, client: SearchClient, index: str = OFFSETS_INDEX):
        self.client = client
        self.index = index
        self._ready = False

    def _ensure(self) -> None:
        if self._ready:
            return
        if not self.client.exists(self.index):
            try:
                self.client.request("PUT", f"/{self.index}", {
                    "settings": {"index": {"hidden": True, "number_of_shards": 1}},
                    "mappings": OFFSETS_MAPPING})
            except SearchError as exc:
                if exc.error_type != "resource_already_exists_exception":
                    raise
        self._ready = True

    def get(self, name: str) -> dict[str, Any] | None:
        """The offsets document of the physical index ``name`` (a realtime get: no refresh
        needed), or None."""
        self._ensure()
        answer = self.client.request("GET", f"/{self.index}/_doc/{quote(name, safe='')}",
                                     ok=(404,))
        if not answer.get("found"):
            return None
        return answer["_source"]

    def offsets(self, name: str, uuid: str) -> dict[TopicPartition, int]:
        """The stored offsets of index ``name`` with that uuid (empty for another index of the
        same name, deleted since)."""
        doc = self.get(name)
        if doc is None or doc.get("index_uuid") != uuid:
            return {}
        return {(t, int(p)): int(o) for t, p, o in doc.get("offsets", [])}

    def save(self, name: str, uuid: str, alias: str | None,
             offsets: dict[TopicPartition, int], released: bool = False) -> None:
        """Write the offsets document; durable when this returns (the translog)."""
        self._ensure()
        doc = {"index": name, "index_uuid": uuid, "alias": alias,
               "updated_at": int(time.time() * 1000), "released": released,
               "offsets": [[t, p, o] for (t, p), o in sorted(offsets.items())]}
        self.client.request("PUT", f"/{self.index}/_doc/{quote(name, safe='')}", doc)

    def delete(self, name: str) -> None:
        self._ensure()
        self.client.request("DELETE", f"/{self.index}/_doc/{quote(name, safe='')}", ok=(404,))
