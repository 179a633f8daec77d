"""Avro record schemas for a table's key and value, and fast row encoders for them.

A value record has one field per live column, each ``["null", T]`` with ``"default": null`` so
that ``ADD COLUMN`` (and ``DROP COLUMN``) keep the subject BACKWARD-compatible; a key record has
the key columns as plain ``T`` (keys are never null). ``T`` and the text → value conversion come
from :func:`schemas.pgtypes.codec_for`. Every field keeps the column's original name in
``pg.name``, its declared type in ``pg.type`` and, for NOT NULL columns, ``"pg.notnull": true``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from schemas.avro_writer import compile_row_writer
from schemas.pgtypes import (
    Codec,
    Column,
    TypeConversionError,
    avro_name,
    codec_for,
    nullable,
    short_hash,
)
from schemas.temporal import in_mode

__all__ = [
    "field_names",
    "record_schemas",
    "row_encoder",
    "row_writer",
    "sanitize_name",
    "without_logical_types",
]

RowEncoder = Callable[[Sequence[str | None]], dict[str, Any]]


def sanitize_name(name: str) -> str:
    """``name`` as a valid Avro name ``[A-Za-z_][A-Za-z0-9_]*``: every other character becomes
    ``_`` and a name starting with a digit (or empty) gets a ``_`` prefix."""
    return avro_name(name)


def field_names(columns: Sequence[Column]) -> list[str]:
    """The Avro field name of each column, in column order.

    Names are sanitised with :func:`sanitize_name`. When sanitised names collide, a column whose
    name was already valid keeps it and the others get ``_`` plus a short stable hash of their
    original name; the result is always distinct.
    """
    originals = [c.name for c in columns]
    if len(set(originals)) != len(originals):
        dupes = sorted(n for n, k in Counter(originals).items() if k > 1)
        raise ValueError(f"duplicate column names: {dupes}")
    base = [sanitize_name(n) for n in originals]
    counts = Counter(base)
    out: list[str | None] = [None] * len(originals)
    used: set[str] = set()
    for i, (orig, name) in enumerate(zip(originals, base, strict=True)):
        if counts[name] == 1 or name == orig:
            out[i] = name
            used.add(name)
    for i, (orig, name) in enumerate(zip(originals, base, strict=True)):
        if out[i] is None:
            length = 6
            candidate = f"{name}_{short_hash(orig, length)}"
            while candidate in used or candidate in counts:
                length += 2
                candidate = f"{name}_{short_hash(orig, length)}"
            out[i] = candidate
            used.add(candidate)
    return [n for n in out if n is not None]


def _field(column: Column, name: str, codec: Codec, defined: set[str], key: bool,
           renamed: tuple[str, str] | None) -> dict:
    avro_type = codec.schema_in(defined)
    field: dict[str, Any] = {"name": name}
    if key:
        field["type"] = avro_type
    else:
        field["type"] = nullable(avro_type)
        field["default"] = None
    field["pg.name"] = column.name
    field["pg.type"] = column.formatted or column.type.name
    if column.not_null:
        field["pg.notnull"] = True
    if column.missing is not None:
        field["pg.missing"] = column.missing  # what rows older than the column hold
    if renamed is not None:  # the version right after RENAME COLUMN: (old name, old field)
        field["pg.renamed"] = renamed[0]
        field["aliases"] = [renamed[1]]  # Avro's own way: a reader matches the old field
    return field


def record_schemas(
    namespace_schema: str, table: str, columns: list[Column], key_columns: list[str],
    temporal_mode: str = "logical", renamed: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[dict | None, dict]:
    """(key record schema or None when ``key_columns`` is empty, value record schema).

    ``temporal_mode`` (:mod:`schemas.temporal`): ``logical`` types dates and times with Avro
    logical types, ``plain`` with ``connect.name`` annotations only; the values are the same.

    The value record is named after the table in the namespace of its schema (both sanitised);
    the key record has the same name in the namespace ``<schema>.key``, so that the two never
    share a full name. Named types used several times (``bottler.pg.Interval``, range records)
    are defined at their first use and referenced by full name afterwards.

    ``renamed`` (column name -> (its name before ``RENAME COLUMN``, that column's field name))
    marks the renamed columns' fields with ``pg.renamed`` and ``aliases``.
    """
    names = field_names(columns)
    codecs = [codec_for(c) for c in columns]
    namespace = sanitize_name(namespace_schema)
    record = sanitize_name(table)

    def record_in(ns: str, positions: Iterable[int], key: bool) -> dict:
        defined = {f"{ns}.{record}"}  # named types are defined once per record schema
        return {
            "type": "record",
            "name": record,
            "namespace": ns,
            "pg.schema": namespace_schema,
            "pg.table": table,
            "fields": [_field(columns[i], names[i], codecs[i], defined, key,
                              (renamed or {}).get(columns[i].name)) for i in positions],
        }

    value = in_mode(record_in(namespace, range(len(columns)), key=False), temporal_mode)
    if not key_columns:
        return None, value
    key = record_in(f"{namespace}.key", _positions(columns, key_columns), key=True)
    return in_mode(key, temporal_mode), value


def _positions(columns: Sequence[Column], wanted: Iterable[str]) -> list[int]:
    index = {c.name: i for i, c in enumerate(columns)}
    missing = [n for n in wanted if n not in index]
    if missing:
        raise ValueError(f"key columns not in the table: {missing}")
    return [index[n] for n in wanted]


def row_encoder(columns: Sequence[Column], key_columns: Sequence[str] | None = None, *,
                codecs: Sequence[Codec] | None = None) -> RowEncoder:
    """A function turning one row's texts (``str | None`` for every column, in column order)
    into the dict fastavro writes with the value schema of :func:`record_schemas`, or, with
    ``key_columns``, with its key schema (the input is still the whole row; other columns are
    ignored and may be None; a NULL key column raises :class:`TypeConversionError`).

    Build it once per table version and reuse it: it is a generated function that calls each
    column's converter directly, skipping text columns. ``codecs``: the columns'
    :func:`codec_for`, when the caller builds several encoders or writers of them.
    """
    names = field_names(columns)
    codecs = _codecs(columns, codecs)
    ncols = len(columns)
    is_key = key_columns is not None
    positions = _positions(columns, key_columns) if is_key else list(range(ncols))

    namespace: dict[str, Any] = {}
    targets = "".join(f"v{i}, " for i in range(ncols))
    lines = ["def encode(row):", "    try:", f"        ({targets}) = row"]
    if is_key and positions:
        null_test = " or ".join(f"v{i} is None" for i in positions)
        lines.append(f"        if {null_test}:")
        lines.append("            raise ValueError('NULL in a key column')")
    items = []
    for i in positions:
        parse = codecs[i].parse
        if parse is str:
            expr = f"v{i}"
        else:
            namespace[f"p{i}"] = parse
            expr = f"p{i}(v{i})" if is_key else f"None if v{i} is None else p{i}(v{i})"
        items.append(f"{names[i]!r}: {expr}")
    lines.append("        return {" + ", ".join(items) + "}")
    lines.append("    except Exception:")
    lines.append("        _diagnose(row)")
    lines.append("        raise")

    def diagnose(row: Sequence[str | None]) -> None:
        if len(row) != ncols:
            raise ValueError(f"row has {len(row)} values, the table has {ncols} columns")
        for i in positions:
            text = row[i]
            if text is None:
                if is_key:
                    raise TypeConversionError(
                        codecs[i].type_name, None, "a key column is NULL", columns[i].name
                    )
                continue
            try:
                codecs[i].from_text(text)
            except TypeConversionError as exc:
                raise TypeConversionError(
                    exc.type_name, exc.value, exc.reason, columns[i].name
                ) from None

    namespace["_diagnose"] = diagnose
    exec("\n".join(lines), namespace)  # noqa: S102 - names are sanitised, values are bound
    return namespace["encode"]


def row_writer(columns: Sequence[Column], schema: dict, key_columns: Sequence[str] | None = None,
               prefix: bytes = b"", *, codecs: Sequence[Codec] | None = None,
               ) -> Callable[[Sequence[str | None]], bytes]:
    """The bytes of a row's texts (as for :func:`row_encoder`) with ``schema``, its value or,
    with ``key_columns``, its key schema from :func:`record_schemas`, preceded by ``prefix``:
    what the writer of ``schema`` makes of :func:`row_encoder`'s dict, without the dict. Its
    errors are plain; the dict's way names the column (the caller goes that way on failure).
    ``codecs``: as for :func:`row_encoder`."""
    codecs = _codecs(columns, codecs)
    positions = (_positions(columns, key_columns) if key_columns is not None
                 else range(len(columns)))
    return compile_row_writer(schema, [(i, codecs[i].parse) for i in positions], len(columns),
                              prefix)


def _codecs(columns: Sequence[Column], codecs: Sequence[Codec] | None) -> Sequence[Codec]:
    return [codec_for(c) for c in columns] if codecs is None else codecs


def without_logical_types(schema: Any, keep: Iterable[str] = ("decimal",)) -> Any:
    """A copy of ``schema`` without ``logicalType`` attributes (except those in ``keep``).

    The binary encoding is the same, so it serves as the *writer* schema for reading: fastavro
    turns date/time logical types into ``datetime`` objects, which cannot hold BC dates, years
    past 9999, ``24:00:00`` or the infinities, and fails on them; read with this schema to get
    the plain ints (days, micros) instead.
    """
    keep = frozenset(keep)
    if isinstance(schema, list):
        return [without_logical_types(s, keep) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == "logicalType" and v not in keep:
            continue
        if k == "fields":
            v = [{**f, "type": without_logical_types(f["type"], keep)} for f in v]
        elif k in ("items", "values", "type"):
            v = without_logical_types(v, keep)
        out[k] = v
    return out
