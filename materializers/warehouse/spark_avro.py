"""The registry's schemas as Spark expressions, for the warehouse's spark route (native.py): a
table topic's writer schemas by id, ``from_avro`` on the bytes after Confluent's 5-byte header
with the writer schema of each row's id (read as the topic's latest schema), and the Delta
columns of a decoded record, mapped as types.py maps them for the default route, with the
condition of a row whose values Delta cannot hold (a poison row).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from common.errors import BottlerError
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


def decoded(column: str, writers: dict[int, str], reader: dict) -> Any:
    """The framed Avro ``column`` decoded by ``from_avro`` with its schema id's writer schema,
    read as ``reader``: null for an id not among ``writers`` or a body that does not decode."""
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
        branches.append(F.when(schema_id == sid, from_avro(body, writer, options)))
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
        if array_branches(avro, named) is not None:
            raise BottlerError("the spark route does not map PostgreSQL array columns yet",
                               "run the warehouse without --route spark")
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
