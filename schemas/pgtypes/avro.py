"""The Avro side of the mapping: the namespace of its named types, the Avro ranges and
PostgreSQL's infinities as Avro values, the :class:`Codec` of a column, and the rules for Avro
names and named types."""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Callable
from typing import Any

from schemas.avro_names import full_name, resolve_names
from schemas.pgtypes.model import PgType, TypeConversionError

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

#: ``date 'infinity'`` / ``'-infinity'`` as Avro ``date`` (days): the int's extremes.
DATE_POS_INFINITY, DATE_NEG_INFINITY = INT_MAX, INT_MIN
#: timestamp(tz) ``'infinity'`` / ``'-infinity'`` as micros: the long's extremes.
TS_POS_INFINITY, TS_NEG_INFINITY = LONG_MAX, LONG_MIN
#: PostgreSQL 17's infinite intervals, as PostgreSQL stores them (every field at its extreme).
INTERVAL_POS_INFINITY = {"months": INT_MAX, "days": INT_MAX, "microseconds": LONG_MAX}
INTERVAL_NEG_INFINITY = {"months": INT_MIN, "days": INT_MIN, "microseconds": LONG_MIN}

#: Namespace of the named Avro types this module defines (Interval, range records).
AVRO_NAMESPACE = "bottler.pg"



class Codec:
    """How one column's values map to Avro.

    ``schema``: the Avro type of a non-null value (a str, dict or list; named types fully
    defined, each once). ``parse``: the raw converter, text → Avro value, as fast as it gets; it
    raises ``ValueError`` (or another exception) on bad input. ``from_text``: the same
    conversion, raising :class:`TypeConversionError` naming the type and the value.
    ``type_name``: the PostgreSQL type the codec was built for (for messages).
    """

    __slots__ = ("schema", "parse", "type_name")

    def __init__(self, schema: Any, parse: Callable[[str], Any], type_name: str):
        # a private copy: the module's schema constants are never handed out to be mutated
        self.schema = copy.deepcopy(dedupe_named_types(schema, set()))
        self.parse = parse
        self.type_name = type_name

    def from_text(self, text: str | None) -> Any:
        if text is None:
            return None
        try:
            return self.parse(text)
        except TypeConversionError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure is a bad value for this type
            reason = str(exc) or type(exc).__name__
            raise TypeConversionError(self.type_name, text, reason) from None

    @property
    def named_types(self) -> list[str]:
        """Full names of the named Avro types the schema defines, in definition order."""
        return list(resolve_names(self.schema)[1])

    def schema_in(self, defined: set[str]) -> Any:
        """The schema for use inside a larger schema where the named types in ``defined`` are
        already defined: those become references by full name, the others are defined here
        and added to ``defined``."""
        return dedupe_named_types(self.schema, defined)

    def __repr__(self) -> str:
        return f"Codec({self.type_name}, {self.schema!r})"


_NAMED = ("record", "enum", "fixed")


def dedupe_named_types(schema: Any, defined: set[str]) -> Any:
    """``schema`` with every named type (record, enum, fixed) defined once: a type whose full
    name is in ``defined`` (or was defined earlier in the walk) is replaced by its full name.
    ``defined`` is updated. The named types here always carry an explicit namespace."""
    if isinstance(schema, list):
        return [dedupe_named_types(branch, defined) for branch in schema]
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    if kind in _NAMED and "name" in schema:
        full = full_name(schema["name"], schema.get("namespace"))
        if full in defined:
            return full
        defined.add(full)
        if kind == "record":
            fields = schema["fields"]
            return {
                **schema,
                "fields": [{**f, "type": dedupe_named_types(f["type"], defined)} for f in fields],
            }
        return schema
    if kind == "array":
        return {**schema, "items": dedupe_named_types(schema["items"], defined)}
    if kind == "map":
        return {**schema, "values": dedupe_named_types(schema["values"], defined)}
    if isinstance(kind, dict | list):
        return {**schema, "type": dedupe_named_types(kind, defined)}
    return schema


def nullable(schema: Any) -> list:
    """``["null", schema]``, flattened when ``schema`` is itself a union (Avro forbids nesting)."""
    if isinstance(schema, list):
        return schema if "null" in schema else ["null", *schema]
    return ["null", schema]


_INVALID_NAME_CHARS = re.compile(r"[^A-Za-z0-9_]")


def avro_name(name: str, stable: bool = False) -> str:
    """``name`` made a valid Avro name: invalid characters become ``_``, a leading digit (or an
    empty name) gets a ``_`` prefix. With ``stable``, a name that had to change also gets a short
    hash of the original, so that distinct originals stay distinct."""
    out = _INVALID_NAME_CHARS.sub("_", name)
    if not out or out[0].isdigit():
        out = "_" + out
    if stable and out != name:
        out = f"{out}_{short_hash(name)}"
    return out


def short_hash(text: str, length: int = 6) -> str:
    """A short stable hash of ``text`` (hex of its SHA-1)."""
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def type_namespace(pg: PgType) -> str:
    if pg.schema == "pg_catalog":
        return AVRO_NAMESPACE
    return f"{AVRO_NAMESPACE}.{avro_name(pg.schema, stable=True)}"
