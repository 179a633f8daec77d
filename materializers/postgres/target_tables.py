"""The replica's target tables: each one created, adopted or evolved to the value schema of the
changes it receives (under the replica's ownership rules), and described for writing its rows."""

from __future__ import annotations

import logging
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import psycopg

from materializers.core.changes import Change, TableId
from materializers.postgres import ownership
from materializers.postgres.ddl import (
    ColumnShape,
    TableShape,
    create_statements,
    desired_shape,
    evolve_statements,
    existing_shape,
)
from materializers.postgres.values import Converter, derived_type, text_converter
from schemas.avro_names import resolve_names

log = logging.getLogger(__name__)

DIRECT_WAIT_MAX = 64  # at most this many segments of a table staged between two direct COPYs
DDL_LOCK = 0x626F74746C6572  # "bottler": the advisory lock of table creation and evolution


@dataclass
class TargetTable:
    """What the sink knows of one target table in the current transaction."""

    id: TableId
    shape: TableShape
    schema_id: int | None = None  # the value schema the shape was built from (None: catalog)
    fields: list[tuple[str, str, Converter]] = field(default_factory=list)  # (field, col, conv)
    direct_from: int = 0  # the sink's segment count from which new rows are COPYed straight in
    direct_wait: int = 1  # segments to stage after a failed attempt: 1, 2, 4 … DIRECT_WAIT_MAX

    @property
    def keyed(self) -> bool:
        return bool(self.shape.key)


@dataclass
class Segment:
    """Changes of one table between two barriers (truncate, schema version): last per key."""

    table: TableId
    value_schema: dict | None = None
    value_schema_id: int | None = None
    key_schema: dict | None = None
    rows: dict[Any, Change] = field(default_factory=dict)  # keyed: identity -> last change
    appended: list[Change] = field(default_factory=list)  # unkeyed upserts, in order
    topic: str | None = None  # the table topic its changes come from (None: a seed's)


class TargetTables:
    """The :class:`~materializers.postgres.sink.PostgresSink`'s target tables, as known in its
    open transaction: expects its ``_conn``, ``_tables``, ``_builtin`` and ``_claim``."""

    def _table(self, segment: Segment) -> TargetTable | None:
        """The target table of a segment, created or evolved to the segment's value schema."""
        known = self._tables.get(segment.table)
        schema = segment.value_schema
        if known is not None and (schema is None or known.schema_id == segment.value_schema_id):
            return known
        # Instances of the view (one consumer group) meeting a new table or schema version at
        # once: one creates or alters it, the others wait for its commit and then see it.
        self._conn.execute("select pg_advisory_xact_lock(%s)", (DDL_LOCK,))
        existing = existing_shape(self._conn, segment.table)
        if schema is None:  # deletes only: the table as it is
            if existing is None:
                return None
            if segment.key_schema is None:
                return None
            self._claim(segment.table, segment.topic)
            known = self._describe(segment.table, existing, segment.key_schema, None)
            self._tables[segment.table] = known
            return known
        resolved, named = resolve_names(schema)  # fields may refer to types defined before
        desired = desired_shape(resolved, segment.key_schema,
                                lambda f: self._target_type(f, named))
        if existing is None:
            statements = create_statements(segment.table, desired)
            owned = ownership.Ownership(adopted=False, columns=frozenset())
            log.info("creating %s", segment.table)
        else:
            owned = self._claim(segment.table, segment.topic)
            ownership.conflicts(self._conn, segment.table, existing, desired, owned)
            statements = evolve_statements(segment.table, existing, desired, owned.columns)
            if statements:
                log.info("evolving %s: %s", segment.table, "; ".join(statements))
        for statement in statements:
            self._alter(segment.table, statement)
        # the replica's columns now: its own the source still has, and those it just added
        have = {c.name for c in existing.columns} if existing else set()
        wanted = {c.name for c in desired.columns}
        mine = (owned.columns & wanted) | (wanted - have)
        if existing is None or mine != owned.columns:
            ownership.record(self._conn, segment.table,
                             ownership.Ownership(owned.adopted, frozenset(mine)), segment.topic)
        # a column the user made GENERATED (the source's is too) computes its own values:
        # PostgreSQL refuses any written into it
        computed = {c.name for c in existing.columns if c.generated} if existing else set()
        known = self._describe(segment.table, desired, schema, segment.value_schema_id,
                               computed)
        self._tables[segment.table] = known
        return known

    def _alter(self, table_id: TableId, statement: str) -> None:
        fallback = getattr(statement, "fallback", None)
        if fallback is None:
            self._conn.execute(statement)
            return
        try:
            with self._conn.transaction():  # a savepoint: the batch goes on without it
                self._conn.execute(statement)
        except psycopg.errors.DataError as exc:
            log.warning("%s: the values do not convert (%s): %s instead; the capture's "
                        "re-publication of the table brings the source's values", table_id,
                        str(exc).strip().splitlines()[0], fallback)
            self._conn.execute(fallback)

    def _describe(self, table_id: TableId, shape: TableShape, schema: dict,
                  schema_id: int | None, computed: Collection[str] = ()) -> TargetTable:
        """The table as the replica writes it: each field of ``schema`` into its column, but
        those of the ``computed`` (generated) columns."""
        schema, named = resolve_names(schema)
        fields = []
        by_name = {c.name: c for c in shape.columns}
        for f in schema["fields"]:
            name = f.get("pg.name", f["name"])
            if name in computed:
                continue
            column = by_name.get(name) or ColumnShape(name, "text")
            fields.append((f["name"], name,
                           text_converter(f["type"], named, f.get("pg.type", ""), column.type)))
        if schema_id is None:  # described from a key schema: the key columns only
            shape = TableShape(shape.columns, tuple(f[1] for f in fields))
        return TargetTable(table_id, shape, schema_id, fields)

    def _target_type(self, f: dict, named: dict[str, dict]) -> str:
        pg_type = f.get("pg.type", "")
        if pg_type and self._is_builtin(pg_type):
            return pg_type
        hstore = pg_type.rsplit(".", 1)[-1].strip('"') == "hstore" and self._has("hstore")
        return derived_type(f["type"], named, hstore=hstore)

    def _is_builtin(self, pg_type: str) -> bool:
        cached = self._builtin.get(pg_type)
        if cached is None:
            cached = self._regtype(pg_type, builtin_only=True)
            self._builtin[pg_type] = cached
        return cached

    def _has(self, pg_type: str) -> bool:
        key = "?" + pg_type
        if key not in self._builtin:
            self._builtin[key] = self._regtype(pg_type, builtin_only=False)
        return self._builtin[key]

    def _regtype(self, pg_type: str, builtin_only: bool) -> bool:
        try:
            with self._conn.transaction():
                row = self._conn.execute(
                    "select t.typnamespace = 'pg_catalog'::regnamespace from pg_type t"
                    " where t.oid = to_regtype(%s)", (pg_type,)
                ).fetchone()
        except psycopg.Error:
            return False
        return row is not None and (row[0] or not builtin_only)
