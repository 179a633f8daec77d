"""The conformance suite's cases (tests/test_conformance.py), which other tests feed to a sink too:
the table topics' schemas as the capture writes them, a stream of their messages, and the
Adapter through which the suite reads back what a sink wrote."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from materializers.core import Change, TableId

TOPIC, UNKEYED_TOPIC = "p.items", "p.log"
ITEMS, LOG = TableId("public", "items"), TableId("public", "log")


def _field(name: str, avro: Any, pg_type: str, notnull: bool = False) -> dict:
    f = {"name": name, "type": ["null", avro], "default": None, "pg.name": name,
         "pg.type": pg_type}
    if notnull:
        f["pg.notnull"] = True
    return f


ID = _field("id", "int", "integer", True)


NAME = _field("name", "string", "text")


PRICE = _field("price", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
               "numeric(10,2)")


NOTE = _field("note", "string", "character varying(20)")


def value_schema(table: TableId, fields: list[dict]) -> dict:
    return {"type": "record", "name": table.table, "namespace": table.schema,
            "pg.schema": table.schema, "pg.table": table.table, "fields": fields}


KEY_SCHEMA = {"type": "record", "name": "items", "namespace": "public.key", "pg.schema": "public",
              "pg.table": "items", "fields": [{**ID, "type": "int"}]}


V1 = value_schema(ITEMS, [ID, NAME, PRICE])


V2 = value_schema(ITEMS, [ID, NAME, PRICE, NOTE])  # note added


V3 = value_schema(ITEMS, [ID, NAME, NOTE])  # price dropped


# ALTER TABLE items ADD COLUMN region text DEFAULT 'eu', ADD COLUMN level int DEFAULT 7
REGION = {**_field("region", "string", "text"), "pg.missing": "eu"}


LEVEL = {**_field("level", "int", "integer"), "pg.missing": "7"}


V4 = value_schema(ITEMS, [ID, NAME, PRICE, REGION, LEVEL])


# ALTER TABLE items RENAME COLUMN name TO title: the version right after marks it
TITLE = {**_field("title", "string", "text"), "pg.renamed": "name", "aliases": ["name"]}


V5 = value_schema(ITEMS, [ID, TITLE, PRICE])


LOG_SCHEMA = value_schema(LOG, [_field("at", "int", "integer"), NAME])


SCHEMA_IDS = {id(V1): 101, id(V2): 102, id(V3): 103, id(V4): 104, id(V5): 105,
              id(LOG_SCHEMA): 201}


class Stream:
    """A table topic's messages, in order, as the loop turns them into changes."""

    def __init__(self):
        self.changes: list[Change] = []
        self.offsets: dict[str, int] = {}

    def _next(self, topic: str) -> int:
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        return offset

    def upsert(self, id_: int, schema: dict = V1, **values) -> None:
        row = {f["name"]: values.get(f["name"]) for f in schema["fields"]} | {"id": id_}
        self.changes.append(Change(
            topic=TOPIC, table=ITEMS, op="upsert", key={"id": id_}, value=row, partition=0,
            offset=self._next(TOPIC), key_schema_id=100, value_schema_id=SCHEMA_IDS[id(schema)],
            key_schema=KEY_SCHEMA, value_schema=schema))

    def delete(self, id_: int) -> None:
        self.changes.append(Change(
            topic=TOPIC, table=ITEMS, op="delete", key={"id": id_}, value=None, partition=0,
            offset=self._next(TOPIC), key_schema_id=100, key_schema=KEY_SCHEMA))

    def log(self, at: int, name: str) -> None:
        self.changes.append(Change(
            topic=UNKEYED_TOPIC, table=LOG, op="upsert", key=None,
            value={"at": at, "name": name}, partition=0, offset=self._next(UNKEYED_TOPIC),
            value_schema_id=201, value_schema=LOG_SCHEMA))

    def truncate(self, table: TableId = ITEMS, topic: str = TOPIC) -> None:
        self.changes.append(Change(
            topic=topic, table=table, op="truncate", key=None, value=None, partition=0,
            offset=self._next("p._bottler.truncate"), barrier={0: self.offsets.get(topic, 0)}))


def offsets_of(changes: Sequence[Change]) -> dict[tuple[str, int], int]:
    out: dict[tuple[str, int], int] = {}
    for c in changes:
        topic = "p._bottler.truncate" if c.op == "truncate" else c.topic
        out[(topic, c.partition)] = c.offset + 1
    return out


def feed(sink, changes: Sequence[Change], batch: int = 10_000) -> None:
    """Write and flush ``changes`` in batches of ``batch``, as the loop does."""
    for i in range(0, len(changes), batch):
        part = changes[i:i + batch]
        sink.write(part, offsets_of(part))
        sink.flush()


@dataclass
class Adapter:
    make: Callable[[], Any]  # a sink on a fresh target
    reopen: Callable[[Any], Any]  # a new sink on the same target (a restart)
    keyed: Callable[[Any, TableId, Sequence[str]], dict]  # {key tuple: row tuple}
    unkeyed: Callable[[Any, TableId, Sequence[str]], list]  # sorted row tuples
    max_flushes: int | None = None  # a sink whose flush is costly: at most this many a feed
    loop: bool = True  # whether it sits under the consumer loop (the spark route reads Kafka)

    def sizes(self, changes: Sequence[Change], *sizes: int) -> list[int]:
        """The batch sizes a test feeds ``changes`` in: ``sizes``, each coarse enough for at
        most ``max_flushes`` flushes (the spark route: a Spark batch each)."""
        if self.max_flushes is None:
            return list(sizes)
        least = -(-len(changes) // self.max_flushes)
        return list(dict.fromkeys(max(size, least) for size in sizes))
