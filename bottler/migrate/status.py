"""`bottler migrate status`: how far the target-Postgres replica is behind, per table.

For each source table: its row count in the source and in the target (estimates from
``pg_class.reltuples`` unless exact counts are asked for; a table never analyzed is counted), the
end offsets (high watermarks) of its topic, and the offsets the replica stored with its data for
its consumer group, as its sink reads them back (``PostgresSink.stored``): the difference is the
replica's lag in messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg
from confluent_kafka import Consumer, KafkaException, TopicPartition
from psycopg import sql

from bottler.migrate.catalog import parse_table, user_tables
from common.errors import BottlerError
from common.kafka import Connection, reader_config, servers
from common.pg import connect
from common.redact import redact
from materializers.postgres import DEFAULT_GROUP
from schemas.topics import TRUNCATE, table_topic, with_prefix


@dataclass
class TableStatus:
    schema: str
    table: str
    topic: str
    source_rows: int | None = None
    source_exact: bool = False
    target_rows: int | None = None  # None: the table is not in the target (yet)
    target_exact: bool = False
    topic_exists: bool = False
    end_offsets: dict[int, int] = field(default_factory=dict)  # partition -> high watermark
    stored_offsets: dict[int, int] = field(default_factory=dict)  # partition -> next offset
    lag: int | None = None  # messages; None when the topic does not exist

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def caught_up(self) -> bool:
        return self.topic_exists and self.lag == 0 and self.target_rows is not None


@dataclass
class StatusReport:
    group: str
    tables: list[TableStatus]
    other_topics: list[TableStatus]  # control topics the replica consumes (truncate events)
    offsets_table: bool  # has the replica stored offsets in the target (written anything)?

    @property
    def lag(self) -> int:
        return sum(t.lag or 0 for t in self.tables + self.other_topics)

    @property
    def caught_up(self) -> bool:
        return (self.offsets_table and bool(self.tables)
                and all(t.caught_up for t in self.tables)
                and all(t.lag == 0 for t in self.other_topics))


def _count(conn: psycopg.Connection, schema: str, table: str, exact: bool
           ) -> tuple[int | None, bool]:
    """(rows, exact?) of the table, (None, False) if it does not exist."""
    found = conn.execute(
        """select c.reltuples from pg_class c join pg_namespace n on n.oid = c.relnamespace
           where n.nspname = %s and c.relname = %s and c.relkind in ('r', 'p')""",
        (schema, table),
    ).fetchone()
    if found is None:
        return None, False
    if not exact and found[0] >= 0 and not _partitioned(conn, schema, table):
        return int(found[0]), False
    counted = conn.execute(
        sql.SQL("select count(*) from {}").format(sql.Identifier(schema, table))).fetchone()
    return counted[0], True


def _partitioned(conn: psycopg.Connection, schema: str, table: str) -> bool:
    # A partitioned table's own reltuples stays at -1 or 0: its partitions hold the rows.
    return conn.execute(
        """select c.relkind = 'p' from pg_class c join pg_namespace n on n.oid = c.relnamespace
           where n.nspname = %s and c.relname = %s""", (schema, table)).fetchone()[0]


def watermarks(broker: Connection, topics: set[str]) -> dict[str, dict[int, tuple[int, int]]]:
    """topic -> partition -> (low, high) for each of ``topics`` that exists."""
    # log_level 0: an unreachable broker makes one error, not a log line per retry
    consumer = Consumer(reader_config(broker, "migrate-status", **{
        "socket.timeout.ms": 10000, "log_level": 0}))
    try:
        # All topics at once: asking for one by name could make the broker auto-create it.
        metadata = consumer.list_topics(timeout=10).topics
        found = {}
        for topic in topics & set(metadata):
            found[topic] = {
                p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in sorted(metadata[topic].partitions)
            }
        return found
    except KafkaException as exc:
        raise BottlerError(f"cannot read topic offsets from the Kafka brokers {servers(broker)}: "
                           f"{redact(exc.args[0].str())}",
                           "check --broker and that Kafka is up") from None
    finally:
        consumer.close()


def _lag(item: TableStatus, marks: dict[int, tuple[int, int]] | None) -> None:
    if marks is None:
        return
    item.topic_exists = True
    item.end_offsets = {p: high for p, (_, high) in marks.items()}
    item.lag = sum(max(0, high - max(item.stored_offsets.get(p, 0), low))
                   for p, (low, high) in marks.items())


def status(source_dsn: str, target_dsn: str, broker: Connection, prefix: str = "",
           group: str = DEFAULT_GROUP, tables: list[str] | None = None,
           exact: bool = False) -> StatusReport:
    with connect(source_dsn, autocommit=True) as src, connect(target_dsn, autocommit=True) as dst:
        try:
            names = [parse_table(t) for t in tables] if tables else user_tables(src)
            items = []
            for schema, name in names:
                rows, is_exact = _count(src, schema, name, exact)
                if rows is None:
                    raise BottlerError(f"table {schema}.{name} does not exist in the source")
                item = TableStatus(schema, name, table_topic(prefix, schema, name), rows, is_exact)
                item.target_rows, item.target_exact = _count(dst, schema, name, exact)
                items.append(item)
        except psycopg.Error as exc:
            raise BottlerError(f"reading the databases failed: {redact(str(exc).strip())}"
                               ) from None
    by_topic = {item.topic: item for item in items}
    truncates = with_prefix(prefix, TRUNCATE)  # the control topic the replica reads too
    marks = watermarks(broker, set(by_topic) | {truncates})
    try:
        from materializers.postgres.sink import PostgresSink  # SQLAlchemy: not at start-up

        stored = PostgresSink.stored(target_dsn, group, [
            (topic, p) for topic, partitions in marks.items() for p in partitions])
    except psycopg.Error as exc:
        raise BottlerError(f"reading the replica's offsets failed: {redact(str(exc).strip())}"
                           ) from None
    others: dict[str, TableStatus] = {}
    for (topic, partition), offset in (stored or {}).items():
        if topic in by_topic:
            by_topic[topic].stored_offsets[partition] = offset
        else:
            other = others.setdefault(topic, TableStatus("", "", topic, target_rows=0))
            other.stored_offsets[partition] = offset
    for item in [*items, *others.values()]:
        _lag(item, marks.get(item.topic))
    return StatusReport(group, items, sorted(others.values(), key=lambda o: o.topic),
                        stored is not None)
