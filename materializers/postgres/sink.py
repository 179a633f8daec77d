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

The rooms: :mod:`.target_tables` makes each table fit its value schema, :mod:`.apply` writes
the segments into it, :mod:`.offsets` stores the consumed offsets with them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import psycopg

from common.pg import connect
from materializers.core.changes import Change, TableId, TopicPartition
from materializers.core.sink import Offsets
from materializers.postgres import APPLICATION_NAME, adoption, ownership, privileges
from materializers.postgres.apply import SegmentWriter
from materializers.postgres.offsets import (
    OFFSETS_DDL,
    read_offsets,
    store_offsets,
    with_seed_starts,
)
from materializers.postgres.seeding import handover
from materializers.postgres.target_tables import DDL_LOCK, Segment, TargetTable, TargetTables
from schemas.pgtypes import session_statements

log = logging.getLogger(__name__)


class PostgresSink(SegmentWriter, TargetTables):
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
        self._tables: dict[TableId, TargetTable] = {}
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
            stored = read_offsets(self._conn, self.group_id, partitions)
            found = with_seed_starts(self._conn, self.group_id, partitions, stored)
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
        found = with_seed_starts(self._conn, self.group_id, partitions,
                                  read_offsets(self._conn, self.group_id, partitions))
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
            return with_seed_starts(conn, group_id, partitions,
                                     read_offsets(conn, group_id, partitions))

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
        held = store_offsets(self._conn, self.group_id, self._known, offsets)
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

    def seeded_tables(self) -> dict[str, handover.Seeded]:
        """The tables a seed copied into the target, by topic (see :mod:`.seeding.handover`)."""
        self._reset()
        seeded = handover.load(self._conn, self.group_id)
        self._conn.rollback()
        return seeded

    def prepare_seed(self, table_id: TableId, value_schema_id: int, value_schema: dict,
                     key_schema: dict) -> list[tuple[str, str]]:
        """Create (or adopt, or evolve) ``table_id`` for the value schema a seed copies rows
        of, as the first message of that schema would; returns its ``(column, target type)``
        in the schema's field order. The transaction stays open: ``flush`` commits it."""
        try:
            segment = Segment(table_id, value_schema, value_schema_id, key_schema)
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
        segments: dict[TableId, Segment] = {}
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
                segment = segments[change.table] = Segment(change.table, topic=change.topic)
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
                              + handover.SEEDS_DDL):
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

