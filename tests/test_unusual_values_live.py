"""Every value PostgreSQL accepts reaches the topics, under a running capture with a
`FOR ALL TABLES` publication: arrays of any dimensions and bounds against their declaration,
multiranges, arrays of ranges and of multiranges, composites and domains (arrays of them,
domains over arrays), and the dates and times Python's datetime cannot hold. Each row decodes
with confluent-kafka's own AvroDeserializer in the temporal mode docs/capture.md recommends for
Python consumers (`plain`), the replica (reading plain-mode schemas) ends equal to the source,
text for text, and the capture never stops."""

from __future__ import annotations

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.databases import execute
from tests.support.replica import converge, fetch, replica
from tests.support.topics import read_topic
from tests.support.waiting import wait_for, wait_streaming

pytestmark = pytest.mark.stack

TYPES = """
create type pair as (a int, b text);
create domain posint as int check (value > 0);
create domain intarr as int[];
create domain price as numeric(10,2);
"""

# table → (column declarations, the rows' values as SQL literals, one tuple per row)
TABLES: dict[str, tuple[str, list[tuple[str, ...]]]] = {
    "arrays": ("a int[], a2 int[][], t text[]", [
        ("'{{1,2},{3,4}}'", "'{1,2}'", "'[0:1]={\"x, y\",NULL}'"),
        ("'[2:3]={1,2}'", "'[0:0][5:6]={{1,NULL}}'", "'{{{a}},{{\"}\"}}}'"),
        ("'{{{1}}}'", "'{}'", "'{}'"),
        ("'{1,NULL}'", "'{{1},{2}}'", "'{plain}'"),
    ]),
    "ranges": ("r int4range[], m int4multirange, dm datemultirange, ma int4multirange[]", [
        ("'[0:1]={\"[1,3)\",empty}'", "'{[1,3),[5,)}'", "'{[-infinity,2020-01-01)}'",
         "'{\"{[1,2)}\",NULL,\"{}\"}'"),
        ("'{{\"[1,2)\"},{NULL}}'", "'{}'", "'{[0044-03-15 BC,10000-01-01]}'",
         "'[3:3]={\"{[1,5)}\"}'"),
    ]),
    "composites": ("p pair, ps pair[], d posint, ds posint[], ia intarr, ias intarr[], "
                   "pr price, prs price[]", [
        ("row(1, 'x, \"y\"')", "array[row(1, 'a'), null, row(null, '')]::pair[]", "5",
         "'[0:1]={1,2}'", "'{{1,2},{3,4}}'", "array['{1,2}', '[0:0]={3}', null]::intarr[]",
         "12.30", "'{{1.50,NULL}}'"),
        ("row(null, null)", "'{}'", "1", "'{1}'", "'[5:5]={7}'",
         "array['{{1}}']::intarr[]", "0", "'{0.01}'"),
    ]),
    "temporal": ("d date, ts timestamp, tstz timestamptz, t time, ds date[], iv interval", [
        ("'infinity'", "'infinity'", "'-infinity'", "'24:00:00'",
         "'{infinity,-infinity,0044-03-15 BC}'", "'-1 year +2 months -3 days'"),
        ("'0044-03-15 BC'", "'0044-03-15 12:30:00.000001 BC'", "'10000-01-01 00:00:00+00'",
         "'00:00:00'", "'[0:0]={5874897-12-31}'", "'P1Y2M3DT4H5M6.789S'"),
        ("'-infinity'", "'275760-09-13 00:00:00'", "'infinity'", "'23:59:59.999999'",
         "'{{2020-02-29}}'", "'0'"),
    ]),
}


def _all_rows(stack, topic: str, count: int):
    """The topic's messages once it holds ``count`` keys, else None (it may not exist yet)."""
    try:
        messages = read_topic(stack.kafka, topic)
    except KeyError:
        return None
    return messages if len({m.key() for m in messages}) >= count else None


def _columns(table: str) -> list[str]:
    return [c.split()[0] for c in TABLES[table][0].split(", ")]


def _text_query(table: str) -> str:
    return f"select id, {', '.join(c + '::text' for c in _columns(table))} from {table} order by id"


def test_every_unusual_value_is_published_decoded_and_replicated(stack, source, prefix, start,
                                                                  target):
    execute(source, TYPES)
    capture = start(temporal_mode="plain")  # no --tables: FOR ALL TABLES
    wait_streaming(source, prefix)
    # created under the running capture, as a new table in production would be
    for table, (columns, values) in TABLES.items():
        execute(source, f"create table {table} (id int primary key, {columns})")
        for i, row in enumerate(values):
            execute(source, f"insert into {table} values ({i}, {', '.join(row)})")

    registry = SchemaRegistryClient({"url": stack.registry_url})
    deserialize = AvroDeserializer(registry)  # confluent-kafka's own, fastavro underneath
    for table, (_, values) in TABLES.items():
        topic, count = f"{prefix}.{table}", len(values)
        messages = wait_for(lambda t=topic, n=count: _all_rows(stack, t, n), 60,
                            f"every row of {table}")
        decoded = [deserialize(m.value(), SerializationContext(topic, MessageField.VALUE))
                   for m in messages]
        assert all(isinstance(d, dict) for d in decoded)
        # A row may come twice, never differently: the table joins the capture's publication
        # seconds after it was made and its joining snapshot copies the rows; a stream running
        # behind (a busy machine) decodes the inserts after the join, and pgoutput sends them too.
        by_id: dict[int, list[dict]] = {}
        for d in decoded:
            by_id.setdefault(d["id"], []).append(d)
        assert sorted(by_id) == list(range(len(values)))
        assert all(all(d == copies[0] for d in copies) for copies in by_id.values()), table
    # the plain mode: ints where Python's datetime ends
    temporal = {d["id"]: d for d in (
        deserialize(m.value(), SerializationContext(f"{prefix}.temporal", MessageField.VALUE))
        for m in read_topic(stack.kafka, f"{prefix}.temporal"))}
    assert temporal[0]["d"] == 2**31 - 1 and temporal[0]["t"] == 86_400_000_000
    assert temporal[1]["d"] == -735160
    arrays = {d["id"]: d for d in (
        deserialize(m.value(), SerializationContext(f"{prefix}.arrays", MessageField.VALUE))
        for m in read_topic(stack.kafka, f"{prefix}.arrays"))}
    assert arrays[0]["a"] == {"dimensions": [{"lower": 1, "length": 2}] * 2,
                              "elements": [1, 2, 3, 4]}
    assert arrays[1]["a"] == {"dimensions": [{"lower": 2, "length": 2}], "elements": [1, 2]}
    assert arrays[3]["a"] == [1, None]  # the declared shape stays a plain array

    with replica(stack, target, prefix) as (_sink, _m, failure):
        try:
            converge(source, target, [_text_query(t) for t in TABLES], failure)
        finally:  # on a timeout, say which table differs and how
            for table in TABLES:
                assert fetch(source, _text_query(table)) == fetch(target, _text_query(table))

    # still streaming: a later change of each table arrives too
    for table in TABLES:
        execute(source, f"delete from {table} where id = 0")
    wait_for(lambda: all(any(m.value() is None for m in read_topic(stack.kafka, f"{prefix}.{t}"))
                         for t in TABLES), 60, "the deletes")
    assert capture.thread.is_alive() and capture.error is None
