"""The two temporal modes: how dates and times are typed in the published schemas.

The values are the same in both (days since 1970-01-01, microseconds since 1970 or since
midnight: see docs/type-mapping.md); only the schema's annotation differs:

- ``logical`` (the default): Avro logical types (``date``, ``time-micros``, ``timestamp-micros``,
  ``local-timestamp-micros``), which Java, Spark and confluent-kafka consumers turn into their
  date/time classes. Python's ``datetime`` stops at year 9999, so fastavro (and with it
  confluent-kafka's ``AvroDeserializer``) raises on ``infinity``, BC dates, years past 9999 and
  ``24:00:00``.
- ``plain``: the same ints with no logical type, annotated the way Kafka Connect annotates its
  own types (``connect.name``, as Debezium's adaptive time mode does), so that every Avro
  library reads every value. ``date`` takes Kafka Connect's ``org.apache.kafka.connect.data.Date``
  (an int of days since the epoch, exactly); the microsecond types, which Kafka Connect has no
  names for (its ``Time``/``Timestamp`` are milliseconds), take bottler's own names under
  ``bottler.time``.

Views decode both: :func:`logical_temporal` turns a plain-mode schema back into the logical one.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CONNECT_NAMES", "TEMPORAL_MODES", "in_mode", "logical_temporal", "plain_temporal"]

TEMPORAL_MODES = ("logical", "plain")

#: Avro logical type → the ``connect.name`` a plain-mode schema carries instead.
CONNECT_NAMES: dict[str, str] = {
    "date": "org.apache.kafka.connect.data.Date",
    "time-micros": "bottler.time.MicroTime",
    "timestamp-micros": "bottler.time.MicroTimestamp",
    "local-timestamp-micros": "bottler.time.LocalMicroTimestamp",
}
_LOGICAL_TYPES = {name: logical for logical, name in CONNECT_NAMES.items()}


def _walk(schema: Any, convert) -> Any:
    if isinstance(schema, list):
        return [_walk(s, convert) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for k, v in schema.items():
        if k == "fields":
            v = [{**f, "type": _walk(f["type"], convert)} for f in v]
        elif k in ("items", "values", "type"):
            v = _walk(v, convert)
        out[k] = v
    return convert(out)


def _to_plain(schema: dict) -> dict:
    name = CONNECT_NAMES.get(schema.get("logicalType", ""))
    if name is None:
        return schema
    plain = {k: v for k, v in schema.items() if k != "logicalType"}
    plain["connect.name"] = name
    return plain


def _to_logical(schema: dict) -> dict:
    logical = _LOGICAL_TYPES.get(schema.get("connect.name", ""))
    if logical is None or "logicalType" in schema:
        return schema
    out = {k: v for k, v in schema.items() if k != "connect.name"}
    out["logicalType"] = logical
    return out


def plain_temporal(schema: Any) -> Any:
    """``schema`` in the plain temporal mode: each date/time logical type replaced by its
    ``connect.name`` (decimals and uuids keep theirs: every Avro library reads them)."""
    return _walk(schema, _to_plain)


def logical_temporal(schema: Any) -> Any:
    """The inverse of :func:`plain_temporal`: a schema of either mode as the logical mode has
    it, so that a view maps a column's type the same way whichever mode the capture ran in."""
    return _walk(schema, _to_logical)


def in_mode(schema: Any, mode: str) -> Any:
    """``schema`` (built in the logical mode) in the temporal ``mode``."""
    if mode == "logical":
        return schema
    if mode == "plain":
        return plain_temporal(schema)
    raise ValueError(f"unknown temporal mode {mode!r}: use one of {', '.join(TEMPORAL_MODES)}")
