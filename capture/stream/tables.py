"""The tables the capture publishes, by relation oid: each one's topic and current codec,
following Relation messages from the stream (new tables, schema changes)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

import psycopg
from confluent_kafka.admin import AdminClient

from capture.publish.encoding import CodecSpec, TableCodec, make_spec
from capture.publish.registrar import Registrar
from capture.setup import topics
from capture.setup.state import TopicOwnership
from capture.source import messages
from capture.source.database import SourceTable, key_columns
from capture.source.typecatalog import load_columns, load_type
from capture.stream.schema_changes import Attributes, compare, shape_of
from common.errors import BottlerError
from schemas.pgtypes import Column, PgType
from schemas.topics import table_topic

log = logging.getLogger(__name__)


class UnkeyedTable(BottlerError):
    pass


class Tables:
    def __init__(
        self,
        catalog: psycopg.Connection,
        registrar: Registrar | None,
        admin: AdminClient,
        prefix: str,
        fmt: str,
        allow_unkeyed: bool,
        topic_config: dict[str, str],
        temporal_mode: str,
        partitions_of: Callable[[str, str], int],
        created_topics: list[str],
        ownership: TopicOwnership,
    ):
        """``created_topics``: where the topics this run makes are added (a failed start
        removes them, capture/setup/undo.py); ``ownership``: records each table topic as the
        capture's own before its first row."""
        self.catalog = catalog
        self.registrar = registrar
        self.admin = admin
        self.prefix = prefix
        self.fmt = fmt
        self.allow_unkeyed = allow_unkeyed
        self.topic_config = topic_config
        self.temporal_mode = temporal_mode
        self.partitions_of = partitions_of
        self.created_topics = created_topics
        self.ownership = ownership
        self._codecs: dict[int, TableCodec] = {}
        self._met: dict[int, dict | None] = {}  # oid -> the value schema the views last met
        self._met_in: dict[int, Attributes] = {}  # oid -> the catalog when _met was built
        self._type_cache: dict = {}
        self._made: dict[str, bool] = {}  # topic -> keyed: made with the start's topics

    def topic_sets(self, tables: list[SourceTable]) -> list[topics.TopicSet]:
        """The topics of ``tables``, for the start to make with its other topics in one request
        (not one per table after the slot, when a seed waits); each table's first codec then
        does not ask for its topic again, unless its key came or went meanwhile."""
        grouped: dict[tuple[bool, int], list[str]] = {}
        for t in tables:
            topic = table_topic(self.prefix, t.schema, t.name)
            self._made[topic] = bool(t.key)
            grouped.setdefault((bool(t.key), self.partitions_of(t.schema, t.name)),
                               []).append(topic)
        return [self._topic_set(names, keyed, partitions)
                for (keyed, partitions), names in grouped.items()]

    def _topic_set(self, names: list[str], keyed: bool, partitions: int) -> topics.TopicSet:
        if keyed:
            return topics.TopicSet(names, config=self.topic_config, partitions=partitions)
        # Kafka refuses keyless messages in compacted topics: keep them all instead
        return topics.TopicSet(plain=names, config={**self.topic_config, "retention.ms": "-1"},
                               partitions=partitions)

    def spec(self, table: SourceTable) -> CodecSpec:
        """The codec spec of a table known from the catalog (snapshot, start-up)."""
        return self._build(table.oid, table.schema, table.name, table.columns, table.key)

    def codec_for(self, table: SourceTable) -> TableCodec:
        """The codec of rows read from the catalog's current description (an incremental
        snapshot's chunk): the stream's while it describes the table the same way; else one
        for these columns, leaving the stream's codec to follow the stream."""
        current = self._codecs.get(table.oid)
        if current is None:
            self.spec(table)  # not streamed yet: its topic and codec are made now
            return self._codecs[table.oid]
        spec = current.spec
        if _same(spec.columns, table.columns) and spec.key_columns == tuple(table.key):
            return current
        return make_spec(table.schema, table.name, spec.topic, table.columns, table.key,
                         self.fmt, self.registrar).codec()

    def known(self, oid: int) -> TableCodec | None:
        return self._codecs.get(oid)

    def by_oid(self, oid: int) -> TableCodec:
        try:
            return self._codecs[oid]
        except KeyError:
            raise BottlerError(f"a change for relation {oid} arrived before its description; "
                               "this is a bug, please report it") from None

    def relation(self, m: messages.Relation) -> str | None:
        """A table's description from the stream: build its codec if new or changed. Returns
        why the table's rows must be published again (a rename, a type change, values a table
        rewrite gave: capture/stream/schema_changes.py), or None."""
        columns = self._columns(m)
        current = self._codecs.get(m.oid)
        if current and _same(current.spec.columns, columns):
            return None
        if m.replica_identity == "f":  # every column is flagged: the key is the primary key
            key = key_columns(self.catalog, m.oid, "d")
        else:
            key = [c.name for c in m.columns if c.key]
        return self._changed(m.oid, m.namespace, m.name, columns, key)

    def described(self, table: SourceTable) -> str | None:
        """A table as the catalog describes it, once the stream has passed every change of it:
        DDL that no row change followed, which no Relation message brings (capture/stream/drift.py).
        Returns what :meth:`relation` returns."""
        return self._changed(table.oid, table.schema, table.name, table.columns, table.key)

    def last_met(self, oid: int, schema: str, name: str) -> dict | None:
        """The value schema the views last met for the table: this run's, else (a restart) the
        latest registered one; None for a table never published."""
        if oid not in self._met:
            self._met[oid] = self._registered(table_topic(self.prefix, schema, name))
        return self._met[oid]

    def _changed(self, oid, schema, name, columns, key) -> str | None:
        previous = self.last_met(oid, schema, name)
        shape = [(c.name, c.formatted or c.type.name) for c in columns]
        renamed: dict[str, tuple[str, str]] = {}  # new name -> (old name, old Avro field)
        why = None
        if previous is not None and shape_of(previous) != shape:
            change = compare(shape_of(previous), shape, Attributes.of(self.catalog, oid),
                             self._met_in.get(oid))
            fields = {f.get("pg.name", f["name"]): f["name"] for f in previous["fields"]}
            renamed = {new: (old, fields[old]) for new, old in change.renamed.items()}
            why = change.republish()
        known = oid in self._codecs
        self._build(oid, schema, name, columns, key, renamed)
        if known:
            log.info("%s.%s: schema changed, new schema version", schema, name)
        return why

    def relabeled(self) -> list[tuple[int, str]]:
        """Tables using an enum type one of whose values was renamed since their codec was
        built (``ALTER TYPE … RENAME VALUE``: every row holding it changed, and none of them
        is in the WAL). Their codecs are rebuilt with the type's values as they are now (the
        value schema's ``pg.enum``); returns (oid, why) for each, to publish them again."""
        used = {oid: {t.oid: t for c in codec.spec.columns for t in _enums(c.type)}
                for oid, codec in self._codecs.items()}
        enums = {t.oid: t for types in used.values() for t in types.values()}
        if not enums:
            return []
        now = dict(self.catalog.execute(
            "select enumtypid, array_agg(enumlabel::text order by enumsortorder)"
            " from pg_catalog.pg_enum where enumtypid = any(%s) group by enumtypid",
            (list(enums),)).fetchall())
        renamed = {oid: t for oid, t in enums.items() if not set(t.labels) <= set(now.get(oid, ()))}
        out = []
        for oid, types in used.items():
            hit = [t for t in types.values() if t.oid in renamed]
            if not hit:
                continue
            spec = self._codecs[oid].spec
            fresh: dict = {}
            columns = [replace(c, type=load_type(self.catalog, c.type.oid, fresh))
                       for c in spec.columns]
            self._build(oid, spec.schema, spec.table, columns, list(spec.key_columns))
            why = "; ".join(f"a value of type {t.schema}.{t.name} renamed" for t in hit)
            out.append((oid, why))
        self._type_cache.clear()  # arrays and domains of the types hold them too
        return out

    def _registered(self, topic: str) -> dict | None:
        if self.fmt != "avro" or self.registrar is None:
            return None
        return self.registrar.latest(f"{topic}-value")

    def _build(self, oid, schema, name, columns, key, renamed=None) -> CodecSpec:
        if not key and not self.allow_unkeyed:
            raise UnkeyedTable(
                f"table {schema}.{name} has no primary key or replica-identity index",
                "add a primary key, or pass --allow-unkeyed",
            )
        topic = table_topic(self.prefix, schema, name)
        if oid not in self._codecs and self._made.pop(topic, None) != bool(key):
            made = self._topic_set([topic], bool(key), self.partitions_of(schema, name))
            topics.ensure_topic_sets(self.admin, [made], created=self.created_topics)
        spec = make_spec(schema, name, topic, columns, key, self.fmt, self.registrar,
                         self.temporal_mode, renamed)
        self.ownership.claim(schema, name, topic, key)
        self._codecs[oid] = spec.codec()
        self._met[oid] = spec.value_schema
        self._met_in[oid] = Attributes.of(self.catalog, oid)  # to know its columns again
        return spec

    def _columns(self, m: messages.Relation) -> list[Column]:
        """Columns as the stream describes them (the catalog may already be ahead of the WAL),
        completed from the catalog where it still agrees (NOT NULL, array dimensions)."""
        current = {c.name: c for c in load_columns(self.catalog, m.oid, include_generated=True)}
        columns = []
        for rc in m.columns:
            known = current.get(rc.name)
            if known and known.type.oid == rc.type_oid and known.typmod == rc.typmod:
                columns.append(known)
                continue
            formatted = self.catalog.execute(
                "select format_type(%s, %s)", (rc.type_oid, rc.typmod)
            ).fetchone()[0]
            columns.append(Column(
                name=rc.name, type=load_type(self.catalog, rc.type_oid, self._type_cache),
                typmod=rc.typmod, formatted=formatted,
            ))
        return columns


def _enums(t: PgType | None):
    """The enum types a column type is made of (itself, an array's element, a domain's base)."""
    if t is None:
        return
    if t.kind == "e":
        yield t
    yield from _enums(t.element)
    yield from _enums(t.base)
    yield from _enums(t.subtype)


def _same(a: tuple[Column, ...], b: list[Column]) -> bool:
    def shape(cols):
        return [(c.name, c.type.oid, c.typmod) for c in cols]

    return shape(a) == shape(b)
