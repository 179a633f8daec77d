"""An adopted table is never touched destructively by events from before its adoption.

``--adopt-existing`` lets the replica write into a table that holds the user's rows. The topics
it then reads from offset zero hold the source's whole history: a ``TRUNCATE`` of long ago, or a
delete of a key the user's table happens to hold too, would remove rows the replica never wrote.

So the replica records its **adoption point** when it first starts with ``--adopt-existing`` (per
consumer group, beside ``bottler.offsets``): the end offset of every partition of its table topics
and of the truncate topic then, in ``bottler.adoption_points``, and the start itself in
``bottler.adoption_starts``. It is never moved after; a topic created later (a table the capture
met later) holds only events from after it. When the replica adopts a table that holds rows and
whose topic has events from before the point, it records a digest of the key of each of the
user's rows in ``bottler.adopted_rows``. An event from before the point (a truncate event, or a
delete, below the point in its own partition) then removes only rows whose key is not recorded:
rows the replica wrote. A user's row an older event changed (an upsert of its key) stays too,
with the user's other columns: the outcome must not depend on whether the replica reads the
table topic or the truncate topic first. Events after the point apply in full: the table follows
the source. (Adoptions recorded before keys were used keep their whole-row digests.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence

import psycopg
from confluent_kafka import Consumer, KafkaException

from common.errors import BottlerError
from common.kafka import Connection, client_config
from materializers.core import watermarks
from materializers.core.changes import Change, TableId, TopicPartition
from materializers.postgres.ddl import qualified, quote, unique_keys
from schemas.topics import TRUNCATE

log = logging.getLogger(__name__)

ADOPTION_DDL = [
    "create table if not exists bottler.adoption_starts (group_id text primary key,"
    " started_at timestamptz not null default now())",
    "create table if not exists bottler.adoption_points (group_id text not null,"
    " topic text not null, partition int not null, next_offset bigint not null,"
    " primary key (group_id, topic, partition))",
    # the columns the user's rows are known by (theirs at the adoption), and the rows' digests
    "create table if not exists bottler.adopted_tables (schema_name text not null,"
    " table_name text not null, columns text[] not null, primary key (schema_name, table_name))",
    "create table if not exists bottler.adopted_rows (schema_name text not null,"
    " table_name text not null, digest text not null,"
    " primary key (schema_name, table_name, digest))",
]


def topic_ends(kafka: Connection, name: str, is_table_topic: Callable[[str], bool],
               truncate_topic: str) -> dict[TopicPartition, int]:
    """The end offset now of every partition of the table topics ``is_table_topic`` accepts
    and of ``truncate_topic``: the adoption point, when the replica first starts adopting."""
    consumer = Consumer(client_config(kafka, **{"group.id": f"{name}-adoption"}))
    try:
        try:
            topics = consumer.list_topics(timeout=10).topics
        except KafkaException as exc:
            raise _unreadable(exc.args[0].str()) from None
        refresh = getattr(is_table_topic, "refresh", None)
        for _ in range(3):  # the capture's own topics (OwnedTopics): its records, to their end
            if refresh is None:
                break
            refresh(topics)
            if getattr(is_table_topic, "complete", True):
                break
        else:
            raise _unreadable("the capture's records of its topics could not be read")
        partitions = [(t, p) for t, meta in topics.items()
                      if t == truncate_topic or is_table_topic(t) for p in meta.partitions]
        marks = watermarks.read(watermarks.Reader(kafka), partitions, name)
        if marks is None:
            raise _unreadable("the broker did not answer")
        return {tp: high for tp, (_, high) in marks.items()}
    finally:
        consumer.close()


def _unreadable(reason: str) -> BottlerError:
    return BottlerError(f"cannot read the topics' end offsets, where --adopt-existing starts:"
                        f" {reason}", "check that the broker is reachable, then start again")


class Point:
    """The adoption point of a consumer group, as recorded (empty when it never adopted)."""

    def __init__(self, conn: psycopg.Connection, group_id: str):
        started = conn.execute("select from bottler.adoption_starts where group_id = %s",
                               (group_id,)).fetchone()
        self.started = started is not None
        self.offsets = {(t, p): o for t, p, o in conn.execute(
            "select topic, partition, next_offset from bottler.adoption_points"
            " where group_id = %s", (group_id,)).fetchall()}
        self.truncate_topic = next((t for t, _ in self.offsets if _is_truncate_topic(t)), None)

    @staticmethod
    def record(conn: psycopg.Connection, group_id: str, ends: Mapping[TopicPartition, int]
               ) -> bool:
        """Record ``ends`` as the point of ``group_id`` unless it has one: whether it did."""
        if conn.execute("insert into bottler.adoption_starts (group_id) values (%s)"
                        " on conflict do nothing", (group_id,)).rowcount == 0:
            return False
        with conn.cursor() as cur:
            cur.executemany("insert into bottler.adoption_points (group_id, topic, partition,"
                            " next_offset) values (%s, %s, %s, %s)",
                            [(group_id, t, p, o) for (t, p), o in ends.items()])
        return True

    def has_history(self, topic: str) -> bool:
        """Whether ``topic`` held events before the point (unknown, before any start: yes)."""
        ends = [o for (t, _), o in self.offsets.items() if t == topic]
        return any(o > 0 for o in ends) if ends or self.started else True

    def before(self, change: Change) -> bool:
        """Whether ``change`` (a delete or a truncate) comes from before the point: its offset
        in its own partition (a truncate's: in the truncate topic) is below it. A partition
        without a point is after it once the point is recorded (its topic came later), and
        before it otherwise (nothing is known of its history)."""
        topic = self.truncate_topic if change.op == "truncate" else change.topic
        point = self.offsets.get((topic, change.partition))
        if point is None:
            return not self.started
        return change.offset < point


def _is_truncate_topic(topic: str) -> bool:
    return topic == TRUNCATE or topic.endswith("." + TRUNCATE)


def _digest(columns: Sequence[str], alias: str = "t") -> str:
    """SQL: a digest of a row's ``columns`` (their text: the session's settings are fixed)."""
    cols = ", ".join(f"{alias}.{quote(c)}" for c in columns)
    return f"md5(row({cols})::text)"


def keep_rows(conn: psycopg.Connection, table: TableId) -> None:
    """Record a digest of the key of each row ``table`` holds now: the user's rows at its
    adoption. By key, not by the whole row: an event from before the point may have changed a
    user's row (an upsert of its key) before a truncate or a delete from before the point comes,
    and the row must stay whichever the replica reads first (its other columns are the user's)."""
    # the primary key, else the narrowest plain unique index (the replica needs one of them to
    # write into an adopted table)
    keys = unique_keys(conn, table)
    columns = keys[0] if keys else [r[0] for r in conn.execute(
        "select attname from pg_attribute where attrelid = %s::regclass and attnum > 0"
        " and not attisdropped order by attnum", (qualified(table),)).fetchall()]
    conn.execute("insert into bottler.adopted_tables (schema_name, table_name, columns)"
                 " values (%s, %s, %s) on conflict do nothing",
                 (table.schema, table.table, columns))
    conn.execute("insert into bottler.adopted_rows (schema_name, table_name, digest)"
                 f" select distinct %s, %s, {_digest(columns)} from {qualified(table)} t"
                 " on conflict do nothing", (table.schema, table.table))
    log.info("adopting %s with its rows: events from before the adoption never remove them",
             table)


def kept_columns(conn: psycopg.Connection, table: TableId) -> list[str] | None:
    """The columns the user's rows were recorded by, None if none were recorded."""
    row = conn.execute("select columns from bottler.adopted_tables"
                       " where schema_name = %s and table_name = %s",
                       (table.schema, table.table)).fetchone()
    return None if row is None else list(row[0])


def not_kept(table: TableId, columns: Sequence[str], alias: str = "t") -> str:
    """SQL condition on ``alias`` (a row of ``table``): not one of the user's rows as adopted."""
    return (f"not exists (select from bottler.adopted_rows k where k.schema_name ="
            f" {_literal(table.schema)} and k.table_name = {_literal(table.table)}"
            f" and k.digest = {_digest(columns, alias)})")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
