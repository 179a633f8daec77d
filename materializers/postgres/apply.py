"""Applying a batch to the target tables, segment by segment: new rows COPYed straight in, the
others staged and merged (upserts, deletes), truncates; the rows of a table adopted with the
user's rows spared from events older than the adoption."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from materializers.core.changes import Change, TableId
from materializers.core.sink import RejectedChange
from materializers.postgres import adoption, ownership
from materializers.postgres.ddl import existing_shape, qualified, quote
from materializers.postgres.target_tables import DIRECT_WAIT_MAX, Segment, TargetTable
from materializers.postgres.values import Converter, copy_escape

_DIGITS_ONLY = {str}  # converters whose text never needs COPY escapes (ints: digits, '-')
_OP = "__bottler_delete"


class SegmentWriter:
    """How the :class:`~materializers.postgres.sink.PostgresSink` writes a segment: expects its
    ``_conn``, ``_tables``, ``_kept``, ``_point``, ``_segments``, ``_stage``, its counters
    ``rows_written`` and ``rows_staged``, ``adopt_existing`` and ``_table``."""

    def _apply_all(self, segments: dict[TableId, Segment]) -> None:
        for segment in segments.values():
            self._apply(segment)
        segments.clear()

    def _apply(self, segment: Segment) -> None:
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

    def _apply_segment(self, segment: Segment) -> None:
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

    def _copy_new_rows(self, table: TargetTable, upserts: list[Change]) -> bool:
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

    def _stage_and_merge(self, table: TargetTable, changes: list[Change],
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

    def _copy_rows(self, table: TargetTable, into: str, changes: list[Change], delete_flag: bool,
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
