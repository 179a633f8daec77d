"""The registry's schemas as Spark expressions, for the warehouse's spark route (native.py): a
table topic's writer schemas by id, ``from_avro`` on the bytes after Confluent's 5-byte header
with the writer schema of each row's id (read as the topic's latest schema), and the Delta
columns of a decoded record, mapped as types.py maps them for the default route, with the
condition of a row whose values Delta cannot hold (a poison row).

A column added with a default (``pg.missing``, schemas/evolution.py): the rows of a writer schema
without it hold the default, not the field's Avro default (null), as on the default route. The
defaults are one Avro record encoded here and decoded by ``from_avro`` like any row
(:meth:`TopicSchemas.missing`), so they take the Delta types of the column they fill.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

from materializers.core.changes import TableId, table_of
from materializers.warehouse.types import (
    DATE_MAX,
    DATE_MIN,
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    TS_MAX,
    TS_MIN,
    column_name,
)
from schemas.avro_names import resolve_names
from schemas.evolution import missing_values
from schemas.pgtypes import array_branches
from schemas.temporal import logical_temporal


@dataclass
class TopicSchemas:
    """A table topic's writer schemas by id (every version of its subjects) and its latest."""

    values: dict[int, str]
    keys: dict[int, str]
    latest: dict  # the latest value schema, parsed (as the logical temporal mode has it)
    latest_key: dict | None

    @property
    def table(self) -> TableId:
        return table_of(self.latest)

    def key_columns(self) -> list[str] | None:
        if self.latest_key is None:
            return None
        names = {f["name"]: column_name(f) for f in self.latest["fields"]}
        return [names.get(f["name"], column_name(f)) for f in self.latest_key["fields"]]

    def missing(self) -> tuple[dict, bytes] | None:
        """The fields of the latest schema added with a default (``pg.missing``): a record
        schema of them alone, and their defaults encoded with it (an Avro body); None if none."""
        import fastavro

        values = missing_values(self.latest)
        if not values:
            return None
        resolved, named = resolve_names(self.latest)
        fields = [{**f, "type": _inlined(f["type"], named)} for f in resolved["fields"]
                  if f["name"] in values]
        schema = {"type": "record", "name": "bottler_missing", "fields": fields}
        body = io.BytesIO()
        fastavro.schemaless_writer(body, fastavro.parse_schema(schema), values)
        return schema, body.getvalue()


def _inlined(avro, named: dict):
    """``avro`` with its references to named types replaced by their definitions (a field
    read on its own), each defined once."""
    seen: set[str] = set()

    def inline(t):
        if isinstance(t, str) and t in named:
            if t in seen:
                return t
            t = named[t]
        if isinstance(t, list):
            return [inline(b) for b in t]
        if isinstance(t, dict):
            if t.get("type") in ("record", "enum", "fixed") and "name" in t:
                full = f"{t['namespace']}.{t['name']}" if t.get("namespace") else t["name"]
                if full in seen:
                    return full
                seen.add(full)
            return {k: inline(v) if k in ("type", "items", "values", "fields") else v
                    for k, v in t.items()}
        return t

    return inline(avro)


def undecoded(schemas: TopicSchemas, struct: str) -> Any:
    """The condition of a row of column ``struct`` (the latest value schema, decoded by
    :func:`decoded`) whose body did not decode: ``from_avro``'s PERMISSIVE mode gives a record
    of nulls then, not a null. A field no row leaves null tells: a key's (a table's key
    columns are in every row), or in an unkeyed table a NOT NULL column's (``pg.notnull``; not
    one added with a default, which the row gets). An unkeyed table whose every column may be
    null cannot tell: such a body is taken for a row of nulls."""
    from pyspark.sql import functions as F  # noqa: N812

    if schemas.latest_key is not None:
        telling = [f["name"] for f in schemas.latest_key["fields"]]
    else:
        telling = [f["name"] for f in schemas.latest["fields"]
                   if f.get("pg.notnull") and f.get("pg.missing") is None]
    if not telling:
        return F.lit(False)
    return F.col(f"{struct}.`{telling[0]}`").isNull()


def missing_struct(schemas: TopicSchemas):
    """The defaults of the latest schema's columns added with one, as a struct column of their
    Avro fields (a constant), and its record schema; None if the schema has none."""
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.avro.functions import from_avro

    found = schemas.missing()
    if found is None:
        return None
    schema, body = found
    return from_avro(F.lit(bytearray(body)), json.dumps(schema)), schema


def topic_schemas(client: Any, topic: str) -> TopicSchemas | None:
    """The schemas of ``topic``'s subjects (TopicNameStrategy); None if it has no value
    subject yet (nothing but tombstones can be in it)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    def versions(subject: str) -> dict[int, str]:
        try:
            found = client.get_versions(subject)
        except SchemaRegistryError as exc:
            if exc.http_status_code == 404:
                return {}
            raise
        return {(r := client.get_version(subject, v)).schema_id: r.schema.schema_str
                for v in found}

    values, keys = versions(f"{topic}-value"), versions(f"{topic}-key")
    if not values:
        return None
    latest = logical_temporal(json.loads(values[max(values)]))
    latest_key = logical_temporal(json.loads(keys[max(keys)])) if keys else None
    return TopicSchemas(values, keys, latest, latest_key)


def decoded(column: str, writers: dict[int, str], reader: dict,
            missing: tuple[Any, dict] | None = None) -> Any:
    """The framed Avro ``column`` decoded by ``from_avro`` with its schema id's writer schema,
    read as ``reader``: null for an id not among ``writers`` or a body that does not decode.
    ``missing`` (:func:`missing_struct`): the defaults a writer schema without their fields
    takes."""
    from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention
    from pyspark.sql.avro.functions import from_avro

    schema_id = F.conv(F.hex(F.substring(column, 2, 4)), 16, 10).cast("int")
    body = F.expr(f"substring(`{column}`, 6)")
    reader_json = json.dumps(reader)
    branches = []
    for sid, writer in sorted(writers.items()):
        options = {"mode": "PERMISSIVE"}
        if json.loads(writer) != reader:
            options["avroSchema"] = reader_json  # the writer's rows read as the latest version
        value = from_avro(body, writer, options)
        if missing is not None:
            has = {f["name"] for f in json.loads(writer).get("fields", ())}
            for f in missing[1]["fields"]:
                if f["name"] not in has:  # a row older than the column: its default
                    value = value.withField(f["name"], missing[0].getField(f["name"]))
        branches.append(F.when(schema_id == sid, value))
    framed = F.substring(column, 1, 1) == F.lit(b"\x00")
    return F.when(framed, F.coalesce(*branches))


def _clamped(c: Any, lo: int, hi: int, neg: int, pos: int, kind: str) -> Any:
    """±infinity (the int extremes) to the ends of Delta's range, as types.py does; a finite
    value outside it is null here, and its row a poison row (:func:`column`). ``kind``: date,
    timestamp or timestamp_ntz (read as UTC: the session's time zone, job.spark_session)."""
    from pyspark.sql import functions as F  # noqa: N812

    if kind == "date":
        raw, to = F.unix_date(c), lambda v: F.date_from_unix_date(F.lit(v))
    else:
        raw = F.unix_micros(c.cast("timestamp"))
        to = lambda v: F.timestamp_micros(F.lit(v)).cast(kind)  # noqa: E731
    return (F.when(raw == pos, to(hi)).when(raw == neg, to(lo))
            .when((raw >= lo) & (raw <= hi), c))


def column(avro: Any, c: Any, named: dict) -> tuple[Any, Any]:
    """The Delta column of one decoded Avro field (``c``), as types.py maps it, and a condition
    true where the value does not fit Delta (a decimal's NaN, a date out of range); None when
    every value fits."""
    from pyspark.sql import functions as F  # noqa: N812

    if isinstance(avro, str) and avro in named:
        return column(named[avro], c, named)
    if isinstance(avro, list):
        arrays = array_branches(avro, named)
        if arrays is not None:
            return _array(arrays[0], c, named)
        branches = [b for b in avro if b != "null"]
        if len(branches) == 1:
            return column(branches[0], c, named)
        first = branches[0] if branches else None
        if (isinstance(first, dict) and first.get("logicalType") == "decimal"
                and branches[1:] == ["string"]):
            return c.getField("member0"), c.getField("member1").isNotNull()
        return F.to_json(c), None
    if isinstance(avro, dict):
        kind, logical = avro.get("type"), avro.get("logicalType")
        if kind == "int" and logical == "date":
            fit = _clamped(c, DATE_MIN, DATE_MAX, INT_MIN, INT_MAX, "date")
            return fit, c.isNotNull() & fit.isNull()
        if kind == "long" and logical in ("timestamp-micros", "local-timestamp-micros"):
            fit = _clamped(c, TS_MIN, TS_MAX, LONG_MIN, LONG_MAX,
                           "timestamp" if logical == "timestamp-micros" else "timestamp_ntz")
            return fit, c.isNotNull() & fit.isNull()
        if kind == "enum":
            return c.cast("string"), None
    return c, None


def _array(declared: dict, c: Any, named: dict) -> tuple[Any, Any]:
    """An array column (``[declared array, general array record]``, decoded as the struct of
    members ``member0``/``member1``): a list of the declared dimensions, as types.py maps it.
    A value of another shape (the general record: its dimensions and flat elements) fits when
    it has as many dimensions (its lower bounds dropped, as Delta lists have none); one with
    more or fewer does not fit (a poison row)."""
    from pyspark.sql import functions as F  # noqa: N812

    depth, leaf = 1, declared["items"]
    while isinstance(leaf, dict) and leaf.get("type") == "array":
        depth, leaf = depth + 1, leaf["items"]
    general = c.getField("member1")
    dims, elements = general.getField("dimensions"), general.getField("elements")
    shaped = F.when(F.size(dims) == depth, _nested(elements, dims, depth))
    value = F.coalesce(c.getField("member0"), shaped)
    wrong = general.isNotNull() & (F.size(dims) != depth)
    probe = F.lit(None)
    mapped, bad = column(leaf, probe, named)
    if mapped is probe and bad is None:
        return value, wrong
    value = _each(value, depth, lambda x: column(leaf, x, named)[0])
    if bad is not None:
        flat = value
        for _ in range(depth - 1):
            flat = F.flatten(flat)
        wrong = wrong | F.exists(flat, lambda x: x.isNotNull() & column(leaf, x, named)[1])
    return value, F.coalesce(wrong, F.lit(False))


def _nested(elements: Any, dims: Any, depth: int) -> Any:
    """Flat row-major ``elements`` as ``depth`` nested lists of the lengths in ``dims``."""
    from pyspark.sql import functions as F  # noqa: N812

    if depth == 1:
        return elements
    inner = F.lit(1)
    for k in range(1, depth):
        inner = inner * dims.getItem(k).getField("length")
    count = dims.getItem(0).getField("length")
    # sequence(0, n) sliced to n items: ascending, and empty for n = 0
    starts = F.slice(F.sequence(F.lit(0), count), 1, count)
    rest = F.slice(dims, 2, depth - 1)
    return F.transform(starts, lambda i: _nested(
        F.slice(elements, i * inner + 1, inner), rest, depth - 1))


def _each(value: Any, depth: int, leaf) -> Any:
    from pyspark.sql import functions as F  # noqa: N812

    if depth == 1:
        return F.transform(value, leaf)
    return F.transform(value, lambda x: _each(x, depth - 1, leaf))


def rows(schema: dict, struct: str, prefix: str = "") -> tuple[list[Any], Any]:
    """The Delta columns of the record ``schema`` decoded into column ``struct``, and the
    condition of a row that does not fit (None: every row fits)."""
    from pyspark.sql import functions as F  # noqa: N812

    resolved, named = resolve_names(schema)
    out, unfit = [], None
    for f in resolved["fields"]:
        c, bad = column(f["type"], F.col(f"{struct}.`{f['name']}`"), named)
        out.append(c.alias(prefix + column_name(f)))
        if bad is not None:
            unfit = bad if unfit is None else unfit | bad
    return out, unfit
