"""The target-Postgres replica: a :class:`~materializers.core.sink.Sink` writing a live copy of the
source tables (no foreign keys) into another PostgreSQL database.

One transaction per batch holds everything: table creation and evolution (DDL is transactional
in PostgreSQL), the rows, truncates, and the consumed offsets in ``bottler.offsets``; ``flush``
commits it. A crash anywhere before the commit leaves the target as it was, and the next run
resumes from the offsets stored with the data: nothing is applied twice or skipped.

Per batch, the changes are cut into segments at every truncate and at every new schema version of
a table; per segment and table, the last change of each key wins. New rows are COPYed straight
into the table when none of their keys is there yet (a rebuild, a stream of inserts); otherwise
the rows are COPYed into a temporary staging table, then one ``INSERT … SELECT … ON CONFLICT
(pk) DO UPDATE`` and one ``DELETE … USING`` apply them. Unkeyed tables: every upsert is COPYed
straight in (an insert).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

from common.pg import connect
from materializers.core.changes import Change, TableId, TopicPartition
from materializers.core.sink import Offsets, OffsetsMoved, RejectedChange
from materializers.postgres import APPLICATION_NAME, adoption, ownership, privileges, seeds
from materializers.postgres.ddl import (
    ColumnShape,
    TableShape,
    create_statements,
    desired_shape,
    evolve_statements,
    existing_shape,
    qualified,
    quote,
)
from materializers.postgres.values import (
    Converter,
    copy_escape,
    derived_type,
    text_converter,
)
from schemas.avro_names import resolve_names
from schemas.pgtypes import session_statements

log = logging.getLogger(__name__)

_DIGITS_ONLY = {str}  # converters whose text never needs COPY escapes (ints: digits, '-')

OFFSETS_DDL = [
    "create table if not exists bottler.offsets (group_id text not null, topic text not null,"
    " partition int not null, next_offset bigint not null,"
    " primary key (group_id, topic, partition))",
]
_OP = "__bottler_delete"
DIRECT_WAIT_MAX = 64  # at most this many segments of a table staged between two direct COPYs


@dataclass
class _Table:
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
class _Segment:
    """Changes of one table between two barriers (truncate, schema version): last per key."""

    table: TableId
    value_schema: dict | None = None
    value_schema_id: int | None = None
    key_schema: dict | None = None
    rows: dict[Any, Change] = field(default_factory=dict)  # keyed: identity -> last change
    appended: list[Change] = field(default_factory=list)  # unkeyed upserts, in order
    topic: str | None = None  # the table topic its changes come from (None: a seed's)


DDL_LOCK = 0x626F74746C6572  # "bottler": the advisory lock of table creation and evolution


def _stored(conn: psycopg.Connection, group_id: str,
            partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    """The offsets stored in ``bottler.offsets`` for ``partitions``."""
    wanted = set(partitions)
    rows = conn.execute(
        'select topic, "partition", next_offset from bottler.offsets where group_id = %s',
        (group_id,),
    ).fetchall()
    return {(t, p): o for t, p, o in rows if (t, p) in wanted}


def _with_seed_starts(conn: psycopg.Connection, group_id: str,
                      partitions: Sequence[TopicPartition],
                      stored: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """``stored``, and where a seeded table's partition has no stored offset yet, the offset
    its seed starts reading from (where the topic stood at the seed's snapshot)."""
    if not conn.execute("select to_regclass('bottler.seeds') is not null").fetchone()[0]:
        return stored
    seeded = seeds.load(conn, group_id)
    found = dict(stored)
    for topic, partition in set(partitions) - stored.keys():
        start = seeded[topic].start_offsets.get(partition) if topic in seeded else None
        if start:
            found[(topic, partition)] = start
    return found


class PostgresSink:
    """Writes changes into ``target_dsn``; offsets are kept in ``bottler.offsets`` under
    ``group_id`` (the materializer's consumer group), in the same transaction as the rows.

    It never destroys what it did not create (see :mod:`~materializers.postgres.ownership`): a
    non-empty table that exists before the replica meets it is written into only with
    ``adopt_existing``, and columns the replica did not create are never dropped or retyped.
    Events from before the adoption point (:meth:`begin_adoption`) never remove the user's rows
    of an adopted table (:mod:`~materializers.postgres.adoption`).

    Counters: ``rows_written`` (rows COPYed), ``rows_staged`` (of them, through a staging
    table), ``flushes``.
    """

    def __init__(self, target_dsn: str, group_id: str, adopt_existing: bool = False):
        self.target_dsn = target_dsn
        self.group_id = group_id
        self.adopt_existing = adopt_existing
        self._kept: dict[TableId, list[str] | None] = {}  # adopted rows' columns (adoption.py)
        self._created_schema = False  # by this sink: a failed start drops it (abandon)
        self.rows_written = 0
        self.rows_staged = 0
        self.flushes = 0
        self._conn = connect(target_dsn, application_name=APPLICATION_NAME)
        self._tables: dict[TableId, _Table] = {}
        self._feeds: dict[TableId, str] = {}  # the topic feeding each table (ownership.py)
        self._builtin: dict[str, bool] = {}
        self._stage = 0
        self._segments = 0  # keyed segments applied, the clock of the direct COPY's back-off
        # The stored offsets of the partitions this instance holds, as it last read or wrote
        # them: another instance of the view that moved one (a truncate's barrier) is seen at
        # the next write (OffsetsMoved), in the same transaction as the rows.
        self._known: dict[TopicPartition, int | None] = {}
        self._writing: dict[TopicPartition, int] = {}
        self._setup()
        with privileges.explained(self._conn):
            self._point = adoption.Point(self._conn, group_id)
        self._conn.rollback()

    # -- the Sink protocol ---------------------------------------------------------------

    def stored_offsets(self, partitions: Sequence[TopicPartition]) -> Offsets | None:
        self._reset()
        with privileges.explained(self._conn):
            self._point = adoption.Point(self._conn, self.group_id)
            stored = _stored(self._conn, self.group_id, partitions)
            found = _with_seed_starts(self._conn, self.group_id, partitions, stored)
        self._conn.rollback()
        # what bottler.offsets holds (a seed's start is not there yet: the first write inserts)
        self._known = {tp: stored.get(tp) for tp in partitions}
        return found

    @property
    def adoption_started(self) -> bool:
        """Whether the adoption point of the sink's group is recorded."""
        return self._point.started

    def begin_adoption(self, ends: Offsets) -> None:
        """Record ``ends`` (every partition of the table topics and the truncate topic: their
        end offsets now) as the adoption point, unless one is recorded: ``--adopt-existing``
        calls this before reading. Events before it never remove the user's rows."""
        self._reset()
        with privileges.explained(self._conn):
            recorded = adoption.Point.record(self._conn, self.group_id, ends)
        if recorded:
            log.info("adopting tables from here: events before %s never remove the rows of the"
                     " tables adopted with rows", ", ".join(
                         f"{t}[{p}]@{o}" for (t, p), o in sorted(ends.items())) or "now")
        self._conn.commit()
        self._point = adoption.Point(self._conn, self.group_id)
        self._conn.rollback()

    def peek_offsets(self, partitions: Sequence[TopicPartition]) -> Offsets:
        """The stored offsets now, between batches (nothing unflushed), keeping what is known
        of the tables: the consumer loop's look for partitions another instance moved."""
        found = _with_seed_starts(self._conn, self.group_id, partitions,
                                  _stored(self._conn, self.group_id, partitions))
        self._conn.rollback()
        return found

    @staticmethod
    def stored(target_dsn: str, group_id: str,
               partitions: Sequence[TopicPartition]) -> Offsets | None:
        """What :meth:`stored_offsets` would answer, without a sink (which sets its target up):
        for tools that only look (``bottler migrate status``). None when the replica never
        wrote into ``target_dsn`` (its offsets table does not exist yet)."""
        with connect(target_dsn, autocommit=True) as conn:
            if not conn.execute("select to_regclass('bottler.offsets') is not null").fetchone()[0]:
                return None
            return _with_seed_starts(conn, group_id, partitions,
                                     _stored(conn, group_id, partitions))

    def write(self, changes: Sequence[Change], offsets: Offsets) -> None:
        try:
            with privileges.explained(self._conn):
                self._write(changes)
                if offsets:
                    self._store_offsets(offsets)
        except BaseException:
            self._reset()
            raise

    def _store_offsets(self, offsets: Offsets) -> None:
        """Held partitions move only from the value last seen (compare and set: the row lock
        orders this with another instance's write of it); others (a truncate's barrier for
        partitions another instance holds) are set."""
        held = {tp: o for tp, o in offsets.items() if tp in self._known}
        others = [(self.group_id, t, p, o) for (t, p), o in offsets.items() if (t, p) not in held]
        with self._conn.cursor() as cur:
            for (t, p), o in held.items():
                expected = self._known[(t, p)]
                if expected is None:
                    cur.execute('insert into bottler.offsets (group_id, topic, "partition",'
                                " next_offset) values (%s, %s, %s, %s) on conflict do nothing",
                                (self.group_id, t, p, o))
                else:
                    cur.execute('update bottler.offsets set next_offset = %s where group_id = %s'
                                ' and topic = %s and "partition" = %s and next_offset = %s',
                                (o, self.group_id, t, p, expected))
                if cur.rowcount != 1:
                    raise OffsetsMoved(f"{t}[{p}]: stored offset no longer {expected}")
            if others:
                cur.executemany(
                    'insert into bottler.offsets (group_id, topic, "partition", next_offset)'
                    " values (%s, %s, %s, %s) on conflict (group_id, topic, \"partition\")"
                    " do update set next_offset = excluded.next_offset",
                    others,
                )
        self._writing.update(held)

    def flush(self) -> None:
        try:
            self._conn.commit()
        except BaseException:
            self._reset()
            raise
        self._known.update(self._writing)
        self._writing = {}
        self.flushes += 1

    def seeded_tables(self) -> dict[str, seeds.Seeded]:
        """The tables a seed copied into the target, by topic (see :mod:`.seeds`)."""
        self._reset()
        seeded = seeds.load(self._conn, self.group_id)
        self._conn.rollback()
        return seeded

    def prepare_seed(self, table_id: TableId, value_schema_id: int, value_schema: dict,
                     key_schema: dict) -> list[tuple[str, str]]:
        """Create (or adopt, or evolve) ``table_id`` for the value schema a seed copies rows
        of, as the first message of that schema would; returns its ``(column, target type)``
        in the schema's field order. The transaction stays open: ``flush`` commits it."""
        try:
            segment = _Segment(table_id, value_schema, value_schema_id, key_schema)
            table = self._table(segment)
            types = {c.name: c.type for c in table.shape.columns}
            return [(col, types[col]) for _, col, _ in table.fields]
        except BaseException:
            self._reset()
            raise

    def close(self) -> None:
        if not self._conn.closed:
            try:
                self._conn.rollback()
            finally:
                self._conn.close()

    # -- batches -------------------------------------------------------------------------

    def _write(self, changes: Sequence[Change]) -> None:
        segments: dict[TableId, _Segment] = {}
        for change in changes:
            if change.op == "truncate":
                self._apply_all(segments)
                self._truncate(change)
                continue
            if self._feeds.get(change.table) != change.topic:
                ownership.check_feed(self._conn, change.table, change.topic,
                                     self._feeds.get(change.table))
                self._feeds[change.table] = change.topic
            segment = segments.get(change.table)
            if (segment is not None and change.op == "upsert"
                    and segment.value_schema_id is not None
                    and change.value_schema_id != segment.value_schema_id):
                self._apply(segments.pop(change.table))  # a new schema version: a barrier
                segment = None
            if segment is None:
                segment = segments[change.table] = _Segment(change.table, topic=change.topic)
            if change.op == "upsert":
                segment.value_schema = change.value_schema
                segment.value_schema_id = change.value_schema_id
            if change.key_schema is not None:
                segment.key_schema = change.key_schema
            if change.key is None:
                if change.op == "upsert":
                    segment.appended.append(change)
            else:
                identity = change.identity
                segment.rows.pop(identity, None)  # keep the list in last-change order
                segment.rows[identity] = change
        self._apply_all(segments)

    def _apply_all(self, segments: dict[TableId, _Segment]) -> None:
        for segment in segments.values():
            self._apply(segment)
        segments.clear()

    def _apply(self, segment: _Segment) -> None:
        try:
            self._apply_segment(segment)
        except (psycopg.errors.DataError, psycopg.errors.IntegrityError) as exc:
            # a column of the user's (adopted table) or a constraint of theirs refuses a row
            raise ownership.TargetConflict(
                f"target table {segment.table} refused the replica's rows:"
                f" {exc.diag.message_primary or exc}",
                "make the target table accept the source's rows (its column types, NOT NULL"
                " and constraints), or drop it so that the replica creates its own",
            ) from None

    def _apply_segment(self, segment: _Segment) -> None:
        table = self._table(segment)
        if table is None:
            return  # only deletes of a table the target never had: nothing to do
        if segment.appended:
            self._copy_rows(table, qualified(table.id), segment.appended, delete_flag=False)
        if not segment.rows:
            return
        if not table.keyed:
            raise RuntimeError(f"{table.id}: keyed changes for a table without a primary key")
        self._segments += 1
        changes = list(segment.rows.values())
        kept = self._kept_columns(table.id)
        if kept is not None:  # deletes from before its adoption: only of the replica's rows
            early = [c for c in changes if c.op == "delete"
                     and self._point.before(c)]
            if early:
                self._stage_and_merge(table, early, keep=kept)
                early_ids = {id(c) for c in early}
                changes = [c for c in changes if id(c) not in early_ids]
                if not changes:
                    return
        if self._segments >= table.direct_from:
            upserts = [c for c in changes if c.op == "upsert"]
            if upserts and self._copy_new_rows(table, upserts):
                changes = [c for c in changes if c.op != "upsert"]
                if not changes:
                    return
        self._stage_and_merge(table, changes)

    def _copy_new_rows(self, table: _Table, upserts: list[Change]) -> bool:
        """COPY upserts straight into the target table, as raw COPY does: half the server's
        work of staging and merging them. Only right if none of their keys is there yet, which
        the primary key checks: on a conflict, everything this COPY did is rolled back (False),
        and the table's next segments are staged for a while, so a stream of updates does not
        pay for a failed COPY per batch. A rebuild from zero and a stream of inserts take it."""
        conn = self._conn
        conn.execute("savepoint bottler_new_rows")
        try:
            self._copy_rows(table, qualified(table.id), upserts, delete_flag=False)
        except psycopg.errors.UniqueViolation:
            conn.execute("rollback to savepoint bottler_new_rows")
            table.direct_from = self._segments + 1 + table.direct_wait
            table.direct_wait = min(2 * table.direct_wait, DIRECT_WAIT_MAX)
            return False
        conn.execute("release savepoint bottler_new_rows")
        table.direct_wait = 1
        return True

    def _stage_and_merge(self, table: _Table, changes: list[Change],
                         keep: Sequence[str] | None = None) -> None:
        """COPY the segment's last change per key into a staging table, then delete and
        upsert from it in one statement each. ``keep``: the deletes spare the user's rows as
        adopted (recorded by these columns)."""
        has_upserts = any(c.op == "upsert" for c in changes)
        columns = [col for _, col, _ in table.fields] if has_upserts else list(table.shape.key)
        self._stage += 1
        stage = quote(f"_bottler_stage_{self._stage}")
        cols = ", ".join(quote(c) for c in columns)
        target = qualified(table.id)
        conn = self._conn
        conn.execute(f"create temp table {stage} on commit drop as"
                     f" select {cols} from {target} with no data")
        conn.execute(f"alter table {stage} add column {_OP} boolean not null")
        self._copy_rows(table, stage, changes, delete_flag=True,
                        only=None if has_upserts else table.shape.key)
        self.rows_staged += len(changes)
        key = table.shape.key
        match = " and ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
        if any(c.op == "delete" for c in changes):
            spare = f" and {adoption.not_kept(table.id, keep)}" if keep is not None else ""
            conn.execute(f"delete from {target} t using {stage} s where s.{_OP} and {match}"
                         + spare)
        if has_upserts:
            rest = [c for c in columns if c not in key]
            conflict = ", ".join(quote(k) for k in key)
            action = ("do update set " + ", ".join(f"{quote(c)} = excluded.{quote(c)}"
                                                   for c in rest)) if rest else "do nothing"
            conn.execute(f"insert into {target} ({cols}) select {cols} from {stage}"
                         f" where not {_OP} on conflict ({conflict}) {action}")

    def _copy_rows(self, table: _Table, into: str, changes: list[Change], delete_flag: bool,
                   only: Sequence[str] | None = None) -> None:
        fields = table.fields
        if only is not None:
            fields = [f for f in fields if f[1] in only]
            fields.sort(key=lambda f: list(only).index(f[1]))
        names = [col for _, col, _ in fields]
        if delete_flag:
            names.append(_OP)
        line = _line_function(fields, delete_flag)
        lines = []
        append = lines.append
        try:
            for change in changes:
                if change.op == "upsert":
                    append(line(change.value, "f"))
                else:
                    append(line(change.key, "t"))
        except Exception:  # noqa: BLE001 - find the value the target cannot be given
            for change in changes:
                row = change.value if change.op == "upsert" else change.key
                try:
                    for name, _, convert in fields:
                        v = row.get(name)
                        if v is not None:
                            copy_escape(convert(v))
                except Exception as exc:  # noqa: BLE001
                    raise RejectedChange(change, f"cannot convert {name}: {exc!r}") from exc
            raise
        lines.append("")
        data = "\n".join(lines)
        with self._conn.cursor() as cur, cur.copy(
            f"copy {into} ({', '.join(quote(n) for n in names)}) from stdin"
        ) as copy:
            copy.write(data)
        self.rows_written += len(changes)

    def _truncate(self, change: Change) -> None:
        """Empty the table; one adopted with the user's rows, by a truncate from before its
        adoption: only of the rows the replica wrote. Never CASCADE: a table of the user's
        that refers to it stops the replica."""
        table_id = change.table
        known = self._tables.get(table_id)
        if known is None:
            if existing_shape(self._conn, table_id) is None:
                return
            self._claim(table_id, change.topic)
        kept = self._kept_columns(table_id)
        conn = self._conn
        try:
            if kept is not None and self._point.before(change):
                conn.execute(f"delete from {qualified(table_id)} t"
                             f" where {adoption.not_kept(table_id, kept)}")
            else:
                conn.execute(f"truncate {qualified(table_id)}")
        except (psycopg.errors.FeatureNotSupported, psycopg.errors.IntegrityError) as exc:
            raise ownership.TargetConflict(
                f"cannot empty target table {table_id} as the source's TRUNCATE did:"
                f" {exc.diag.message_primary or exc}",
                "drop the foreign keys of your tables that refer to it (the replica never"
                " cascades into tables it does not own), then start the replica again",
            ) from None

    def _claim(self, table_id: TableId, topic: str | None) -> ownership.Ownership:
        """:func:`ownership.claim`, recording the user's rows of a table adopted with them
        when its topic has events from before the adoption point."""
        history = topic is None or self._point.has_history(topic)
        owned = ownership.claim(self._conn, table_id, self.adopt_existing, keep_rows=history)
        self._kept.pop(table_id, None)
        return owned

    def _kept_columns(self, table_id: TableId) -> list[str] | None:
        if table_id not in self._kept:
            self._kept[table_id] = adoption.kept_columns(self._conn, table_id)
        return self._kept[table_id]

    # -- tables --------------------------------------------------------------------------

    def _table(self, segment: _Segment) -> _Table | None:
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
        known = self._describe(segment.table, desired, schema, segment.value_schema_id)
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
                  schema_id: int | None) -> _Table:
        schema, named = resolve_names(schema)
        fields = []
        by_name = {c.name: c for c in shape.columns}
        for f in schema["fields"]:
            name = f.get("pg.name", f["name"])
            column = by_name.get(name) or ColumnShape(name, "text")
            fields.append((f["name"], name,
                           text_converter(f["type"], named, f.get("pg.type", ""), column.type)))
        if schema_id is None:  # described from a key schema: the key columns only
            shape = TableShape(shape.columns, tuple(f[1] for f in fields))
        return _Table(table_id, shape, schema_id, fields)

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

    # -- connection ----------------------------------------------------------------------

    def _setup(self) -> None:
        for statement in session_statements():
            self._conn.execute(statement)
        self._conn.commit()
        with privileges.explained(self._conn), self._conn.transaction():
            # instances starting at once: `if not exists` is no guard against a concurrent
            # create (a duplicate key in the catalog), so one creates, the others wait and see it
            self._conn.execute("select pg_advisory_xact_lock(%s)", (DDL_LOCK,))
            if self._conn.execute("select to_regnamespace('bottler')").fetchone()[0] is None:
                # (CREATE SCHEMA IF NOT EXISTS needs CREATE on the database even when it exists)
                self._conn.execute("create schema bottler")
                self._created_schema = True
            for statement in (OFFSETS_DDL + ownership.OWNERSHIP_DDL + adoption.ADOPTION_DDL
                              + seeds.SEEDS_DDL):
                self._conn.execute(statement)

    def abandon(self) -> None:
        """A failed start: the schema ``bottler`` goes if this sink created it and nothing was
        stored in it since (no flush of its own nor of another instance)."""
        if not self._created_schema or self.flushes:
            return
        try:
            self._reset()
            conn = self._conn
            with conn.transaction():
                conn.execute("select pg_advisory_xact_lock(%s)", (DDL_LOCK,))
                used = conn.execute(
                    "select exists (select from bottler.offsets) or exists (select from"
                    " bottler.replica_tables) or exists (select from bottler.seeds)"
                ).fetchone()[0]
                if not used:
                    conn.execute("drop schema bottler cascade")
                    log.info("removed the schema bottler this failed start created")
        except psycopg.Error as exc:  # the failure that brought us here matters more
            log.warning("could not remove the schema bottler this failed start created: %s",
                        exc)
        self._created_schema = False

    def _reset(self) -> None:
        """Discard the open transaction and everything known of the tables in it."""
        self._writing = {}
        self._tables.clear()
        self._kept.clear()
        self._feeds.clear()
        self._builtin.clear()
        if self._conn.closed:
            self._conn = connect(self.target_dsn, application_name=APPLICATION_NAME)
            self._setup()
            return
        try:
            self._conn.rollback()
        except psycopg.Error:
            self._conn.close()
            self._conn = connect(self.target_dsn, application_name=APPLICATION_NAME)
            self._setup()


_LINES: dict[tuple, Any] = {}


def _line_function(fields: Sequence[tuple[str, str, Converter]], delete_flag: bool):
    """``(row, flag) -> one line of COPY text`` (without its newline) for ``fields``, generated
    once per field list: each value converted and escaped, None as ``\\N``, then ``flag``
    (``t`` for a delete) when ``delete_flag``. Raises whatever a converter raises."""
    key = (tuple((name, convert) for name, _, convert in fields), delete_flag)
    found = _LINES.get(key)
    if found is not None:
        return found
    env: dict[str, Any] = {"esc": copy_escape}
    body = ["def line(row, flag):", "    get = row.get"]
    parts = []
    for i, (name, _, convert) in enumerate(fields):
        env[f"c{i}"] = convert
        env[f"n{i}"] = name
        text = f"c{i}(v)" if convert in _DIGITS_ONLY else f"esc(c{i}(v))"
        body.append(f"    v = get(n{i})")
        body.append(f"    p{i} = '\\\\N' if v is None else {text}")
        parts.append(f"p{i}")
    if delete_flag:
        parts.append("flag")
    body.append("    return '\\t'.join((" + ", ".join(parts) + ("," if len(parts) == 1 else "")
                + "))")
    exec("\n".join(body), env)  # noqa: S102 - generated from the field list above
    if len(_LINES) > 1000:
        _LINES.clear()
    _LINES[key] = found = env["line"]
    return found
