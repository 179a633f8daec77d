"""`bottler migrate verify`: is the target database's copy of every source table identical?

Each table is compared by row count and a content checksum computed the same way in both
databases, from the text form of every row (``row(c1, c2, ...)::text``, columns in the source's
order, by name, so a different column order in the target does not matter). Both sessions set
the same output settings (date style, time zone, float digits, bytea format), so equal values
print equally; the replica's contract (same column types) makes the text forms comparable.

Keyed tables are compared in primary-key ranges of ``chunk_rows`` rows (boundaries taken from
the source), each range ``md5(string_agg(md5(row::text), '' order by key))`` on both sides, the
two sides queried in parallel: memory stays bounded and a million rows take seconds. Only the
ranges whose checksums differ are read row by row: both sides streamed ordered by key (server-side
cursors) and merged, giving the keys missing in the target, extra in the target, or different.

Unkeyed tables get an order-independent checksum (count and two 64-bit sums of row hashes) and,
when that differs, the rows (text form) whose number of copies differs.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from bottler.migrate.catalog import (
    TableInfo,
    parse_table,
    prepare_session,
    table_info,
    user_tables,
)
from common.errors import BottlerError
from common.pg import connect
from common.redact import redact

CHUNK_ROWS = 100_000
FETCH_ROWS = 5_000
DEADLOCK_ATTEMPTS = 3
DEADLOCK_BACKOFF = 0.5  # seconds, times the attempt's number

MISSING = "missing in target"
EXTRA = "extra in target"
DIFFERENT = "different"


@dataclass
class Difference:
    kind: str  # MISSING, EXTRA or DIFFERENT
    key: str  # "id=5" / "a=1, b=x"; for an unkeyed table the row's text form


@dataclass
class TableResult:
    schema: str
    table: str
    keyed: bool = True
    exists_in_target: bool = True
    source_rows: int = 0
    target_rows: int | None = None
    source_checksum: str = ""
    target_checksum: str = ""
    differences: list[Difference] = field(default_factory=list)  # the first max_keys
    difference_counts: Counter = field(default_factory=Counter)  # all of them, by kind
    problems: list[str] = field(default_factory=list)  # schema differences
    notes: list[str] = field(default_factory=list)  # informational
    seconds: float = 0.0

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    @property
    def identical(self) -> bool:
        return (self.exists_in_target and not self.problems
                and self.source_rows == self.target_rows
                and self.source_checksum == self.target_checksum
                and not self.difference_counts)


@dataclass
class VerifyReport:
    tables: list[TableResult]
    target_only: list[str]  # tables of the target the source does not have (a note)
    # Sequences the target lacks or that are behind the source's: name -> (source, target)
    # values. Informational: the replica does not carry them (the cutover sets them).
    sequences_behind: dict[str, tuple[int, int | None]] = field(default_factory=dict)

    @property
    def identical(self) -> bool:
        return all(t.identical for t in self.tables)


def _ident(*names: str) -> sql.Composable:
    return sql.Identifier(*names)


class _Side:
    """One database, read in one repeatable-read snapshot (a new one after a deadlock)."""

    def __init__(self, conn: psycopg.Connection, label: str):
        self.conn = conn
        self.label = label
        self._cursors = 0

    def query(self, statement: sql.Composable, params=None) -> list[tuple]:
        return self.conn.execute(statement, params).fetchall()

    def stream(self, statement: sql.Composable, params=None) -> Iterator[tuple]:
        self._cursors += 1
        with self.conn.cursor(name=f"bottler_verify_{self._cursors}") as cur:
            cur.itersize = FETCH_ROWS
            cur.execute(statement, params)
            yield from cur


def _open(dsn: str, label: str) -> psycopg.Connection:
    conn = connect(dsn)
    try:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        conn.read_only = True
        prepare_session(conn)
        conn.commit()  # the settings outlive a rollback (_retrying)
    except psycopg.Error as exc:
        conn.close()
        raise BottlerError(f"cannot prepare the {label} session: {redact(str(exc))}") from None
    return conn


class _Plan:
    """The SQL pieces for one table: its row expression, key, ranges."""

    def __init__(self, info: TableInfo, target: TableInfo, c_ranges: bool):
        self.info = info
        self.table = _ident(info.schema, info.name)
        common = [c for c in info.columns if any(t.name == c.name for t in target.columns)]
        self.row = sql.SQL("md5(row({})::text)").format(
            sql.SQL(", ").join(_ident("_r", c.name) for c in common)
        )
        self.row_text = sql.SQL("row({})::text").format(
            sql.SQL(", ").join(_ident("_r", c.name) for c in common)
        )
        self.key = list(info.key)
        cols = [info.column(k) for k in self.key]
        # ORDER BY in the C collation: the same order in both databases, and Python's str order.
        self.order = sql.SQL(", ").join(
            sql.SQL('{} collate "C"').format(_ident("_r", c.name)) if c.collatable
            else _ident("_r", c.name) for c in cols
        )
        # Range predicates in the native collation use the primary-key index; when the two
        # databases sort the key's text differently, they use C (correct, slower).
        self.range_cols = [
            sql.SQL('{} collate "C"').format(_ident("_r", c.name)) if c.collatable and c_ranges
            else _ident("_r", c.name) for c in cols
        ]
        self.range_order = sql.SQL(", ").join(self.range_cols)
        self.casts = [sql.SQL("%s::" + c.type) for c in cols]
        self.key_cols = sql.SQL(", ").join(_ident("_r", k) for k in self.key)

    def where(self, lo: tuple | None, hi: tuple | None) -> tuple[sql.Composable, list]:
        parts, params = [], []
        lhs = sql.SQL("({})").format(sql.SQL(", ").join(self.range_cols))
        rhs = sql.SQL("({})").format(sql.SQL(", ").join(self.casts))
        if lo is not None:
            parts.append(sql.SQL("{} >= {}").format(lhs, rhs))
            params.extend(lo)
        if hi is not None:
            parts.append(sql.SQL("{} < {}").format(lhs, rhs))
            params.extend(hi)
        if not parts:
            return sql.SQL(""), []
        return sql.SQL(" where ") + sql.SQL(" and ").join(parts), params


def _boundaries(side: _Side, plan: _Plan, chunk_rows: int) -> list[tuple]:
    """Every ``chunk_rows``-th key of the source (as text), in range order."""
    text_keys = sql.SQL(", ").join(
        sql.SQL("{}::text").format(_ident("_b", k)) for k in plan.key)
    statement = sql.SQL(
        "select {text_keys} from (select {keys}, row_number() over (order by {order})"
        " as bottler_rn from {table} as _r) as _b"
        " where _b.bottler_rn % {n} = 1 and _b.bottler_rn > 1 order by _b.bottler_rn"
    ).format(text_keys=text_keys, keys=plan.key_cols, order=plan.range_order,
             table=plan.table, n=sql.Literal(chunk_rows))
    return side.query(statement)


def _chunk_checksum(side: _Side, plan: _Plan, lo, hi) -> tuple[int, str]:
    where, params = plan.where(lo, hi)
    statement = sql.SQL(
        "select count(*), coalesce(md5(string_agg({row}, '' order by {order})), '')"
        " from {table} as _r{where}"
    ).format(row=plan.row, order=plan.order, table=plan.table, where=where)
    count, checksum = side.query(statement, params)[0]
    return count, checksum


def _format_key(names: list[str], values: tuple) -> str:
    return ", ".join(f"{n}={v}" for n, v in zip(names, values, strict=True))


class _OutOfOrder(Exception):
    pass


def _ordered(rows: Iterator[tuple], width: int) -> Iterator[tuple[tuple, str]]:
    """(key, hash) pairs, checking that Python sees the keys strictly increasing."""
    previous = None
    for row in rows:
        key = tuple(row[:width])
        if previous is not None and not previous < key:
            raise _OutOfOrder
        previous = key
        yield key, row[width]


def _merge(source: Iterator, target: Iterator) -> Iterator[tuple[str, tuple]]:
    """Merge two key-ordered (key, hash) streams into (kind, key) differences."""
    s, t = next(source, None), next(target, None)
    while s is not None or t is not None:
        if t is None or (s is not None and s[0] < t[0]):
            yield MISSING, s[0]
            s = next(source, None)
        elif s is None or t[0] < s[0]:
            yield EXTRA, t[0]
            t = next(target, None)
        else:
            if s[1] != t[1]:
                yield DIFFERENT, s[0]
            s, t = next(source, None), next(target, None)


def _diff_chunk(src: _Side, dst: _Side, plan: _Plan, lo, hi) -> Iterator[tuple[str, tuple]]:
    where, params = plan.where(lo, hi)
    statement = sql.SQL("select {keys}, {row} from {table} as _r{where} order by {order}").format(
        keys=plan.key_cols, row=plan.row, table=plan.table, where=where, order=plan.order)
    width = len(plan.key)
    source, target = src.stream(statement, params), dst.stream(statement, params)
    try:
        yield from _merge(_ordered(source, width), _ordered(target, width))
        return
    except _OutOfOrder:
        pass
    finally:
        source.close()
        target.close()
    # Python orders these key values differently from PostgreSQL (an enum, say): compare the
    # range through dictionaries instead (a range holds about chunk_rows rows).
    def load(side: _Side) -> dict:
        return {tuple(r[:width]): r[width] for r in side.stream(statement, params)}

    ours, theirs = load(src), load(dst)
    for key, value in ours.items():
        if key not in theirs:
            yield MISSING, key
        elif theirs[key] != value:
            yield DIFFERENT, key
    for key in theirs.keys() - ours.keys():
        yield EXTRA, key


def _record(result: TableResult, kind: str, key: str, max_keys: int) -> None:
    result.difference_counts[kind] += 1
    if len(result.differences) < max_keys:
        result.differences.append(Difference(kind, key))


def _verify_keyed(src: _Side, dst: _Side, pool: ThreadPoolExecutor, plan: _Plan,
                  result: TableResult, max_keys: int, chunk_rows: int) -> None:
    bounds = _boundaries(src, plan, chunk_rows)
    ranges = list(zip([None, *bounds], [*bounds, None], strict=True))
    src_sums, dst_sums = [], []
    differing = []
    for lo, hi in ranges:
        theirs = pool.submit(_chunk_checksum, dst, plan, lo, hi)
        ours = _chunk_checksum(src, plan, lo, hi)
        theirs = theirs.result()
        src_sums.append(ours)
        dst_sums.append(theirs)
        if ours != theirs:
            differing.append((lo, hi))
    result.source_rows = sum(c for c, _ in src_sums)
    result.target_rows = sum(c for c, _ in dst_sums)
    result.source_checksum = _combine(h for _, h in src_sums)
    result.target_checksum = _combine(h for _, h in dst_sums)
    for lo, hi in differing:
        for kind, key in _diff_chunk(src, dst, plan, lo, hi):
            _record(result, kind, _format_key(plan.key, key), max_keys)
    if differing and not result.difference_counts:
        # Same rows, yet a checksum differed: only possible if the ordering differs.
        result.problems.append("checksums differ but no row does (key ordering?)")


def _combine(hashes) -> str:
    return hashlib.md5("".join(hashes).encode()).hexdigest()


def _unkeyed_checksum(side: _Side, plan: _Plan) -> tuple[int, str]:
    statement = sql.SQL(
        "select count(*),"
        " coalesce(sum(('x' || substr(_h.h, 1, 16))::bit(64)::bigint), 0)::text,"
        " coalesce(sum(('x' || substr(_h.h, 17, 16))::bit(64)::bigint), 0)::text"
        " from (select {row} as h from {table} as _r) as _h"
    ).format(row=plan.row, table=plan.table)
    count, a, b = side.query(statement)[0]
    return count, hashlib.md5(f"{count}:{a}:{b}".encode()).hexdigest()


def _verify_unkeyed(src: _Side, dst: _Side, pool: ThreadPoolExecutor, plan: _Plan,
                    result: TableResult, max_keys: int) -> None:
    theirs = pool.submit(_unkeyed_checksum, dst, plan)
    result.source_rows, result.source_checksum = _unkeyed_checksum(src, plan)
    result.target_rows, result.target_checksum = theirs.result()
    if result.source_checksum == result.target_checksum:
        return
    # The multiset of rows differs: merge both sides' (row hash, copies) ordered by hash.
    statement = sql.SQL(
        "select _h.h, count(*), min(_h.t) from (select {row} as h, {text} as t"
        " from {table} as _r) as _h group by _h.h order by _h.h collate \"C\""
    ).format(row=plan.row, text=plan.row_text, table=plan.table)
    source, target = src.stream(statement), dst.stream(statement)
    s, t = next(source, None), next(target, None)
    while s is not None or t is not None:
        if t is None or (s is not None and s[0] < t[0]):
            for _ in range(s[1]):
                _record(result, MISSING, _short(s[2]), max_keys)
            s = next(source, None)
        elif s is None or t[0] < s[0]:
            for _ in range(t[1]):
                _record(result, EXTRA, _short(t[2]), max_keys)
            t = next(target, None)
        else:
            kind = MISSING if s[1] > t[1] else EXTRA
            for _ in range(abs(s[1] - t[1])):
                _record(result, kind, _short(s[2]), max_keys)
            s, t = next(source, None), next(target, None)


def _short(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _compare_schemas(info: TableInfo, target: TableInfo, result: TableResult) -> None:
    theirs = {c.name: c for c in target.columns}
    ours = {c.name: c for c in info.columns}
    missing = [c for c in ours if c not in theirs]
    extra = [c for c in theirs if c not in ours]
    if missing:
        result.problems.append("columns missing in target: " + ", ".join(missing))
    if extra:
        result.problems.append("extra columns in target: " + ", ".join(extra))
    for name, column in ours.items():
        if name in theirs and theirs[name].type != column.type:
            result.notes.append(f"column {name}: {column.type} in source, "
                                f"{theirs[name].type} in target")
    if info.key and target.key != info.key:
        result.notes.append(f"primary key ({', '.join(info.key)}) in source, "
                            f"({', '.join(target.key) or 'none'}) in target")


def _needs_c_ranges(info: TableInfo, target: TableInfo) -> bool:
    theirs = {c.name: c for c in target.columns}
    return any(info.column(k).collatable and k in theirs
               and info.column(k).collation != theirs[k].collation for k in info.key)


def verify(source_dsn: str, target_dsn: str, tables: list[str] | None = None,
           max_keys: int = 20, chunk_rows: int = CHUNK_ROWS) -> VerifyReport:
    """Compare every table of the source (or ``tables``) with the target."""
    if chunk_rows < 1:
        raise BottlerError("chunk_rows must be at least 1")
    with ExitStack() as stack:
        src_conn = stack.enter_context(_open(source_dsn, "source"))
        dst_conn = stack.enter_context(_open(target_dsn, "target"))
        pool = stack.enter_context(ThreadPoolExecutor(1))
        src, dst = _Side(src_conn, "source"), _Side(dst_conn, "target")
        names = [parse_table(t) for t in tables] if tables else user_tables(src_conn)
        results = []
        for schema, name in names:
            info = table_info(src_conn, schema, name)
            if info is None:
                raise BottlerError(f"table {schema}.{name} does not exist in the source",
                                   "name tables as schema.table; without --tables every "
                                   "table is verified")
            results.append(_verify_table(src, dst, pool, info, max_keys, chunk_rows))
        target_only = []
        if not tables:
            source_set = set(names)
            target_only = [f"{s}.{t}" for s, t in user_tables(dst_conn)
                           if (s, t) not in source_set]
        behind = {}
        if not tables:
            theirs = _sequences(dst_conn)
            for name, value in _sequences(src_conn).items():
                if value is not None and (theirs.get(name) or 0) < value:
                    behind[name] = (value, theirs.get(name))
        return VerifyReport(results, target_only, behind)


def _sequences(conn: psycopg.Connection) -> dict[str, int | None]:
    return dict(conn.execute(
        """select format('%I.%I', schemaname, sequencename), last_value from pg_sequences
           where schemaname not in ('pg_catalog', 'information_schema', 'bottler')"""
    ).fetchall())


def _retrying(read, sides: tuple[_Side, ...]):
    """``read()``, again after a deadlock. The replica applying a DDL on the target meanwhile
    (an AccessExclusiveLock) can deadlock with the share locks verify's transaction holds since
    its first read: rolling back releases them, the DDL completes, and the read can succeed."""
    for attempt in range(1, DEADLOCK_ATTEMPTS):
        try:
            return read()
        except psycopg.errors.DeadlockDetected:
            for side in sides:
                side.conn.rollback()
            time.sleep(DEADLOCK_BACKOFF * attempt)
    return read()


def _verify_table(src: _Side, dst: _Side, pool: ThreadPoolExecutor, info: TableInfo,
                  max_keys: int, chunk_rows: int) -> TableResult:
    started = time.monotonic()
    try:
        result = _retrying(
            lambda: _compare_table(src, dst, pool, info, max_keys, chunk_rows), (src, dst))
    except psycopg.Error as exc:
        raise BottlerError(f"verifying {info.qualified} failed: {redact(str(exc).strip())}",
                           "check that the role can read the table in both databases"
                           ) from None
    result.seconds = time.monotonic() - started
    return result


def _compare_table(src: _Side, dst: _Side, pool: ThreadPoolExecutor, info: TableInfo,
                   max_keys: int, chunk_rows: int) -> TableResult:
    result = TableResult(info.schema, info.name, keyed=bool(info.key))
    target = table_info(dst.conn, info.schema, info.name)
    if target is None:
        result.exists_in_target = False
        result.source_rows = src.query(sql.SQL("select count(*) from {}").format(
            _ident(info.schema, info.name)))[0][0]
        return result
    _compare_schemas(info, target, result)
    target_columns = {c.name for c in target.columns}
    if not set(info.key) <= target_columns or not target_columns & {
            c.name for c in info.columns}:
        # Nothing to compare row by row: the key (or every column) is missing.
        count = sql.SQL("select count(*) from {}").format(_ident(info.schema, info.name))
        result.source_rows = src.query(count)[0][0]
        result.target_rows = dst.query(count)[0][0]
        return result
    c_ranges = _needs_c_ranges(info, target)
    if c_ranges:
        result.notes.append("key collations differ between source and target: "
                            "ranges compared in the C collation (slower)")
    plan = _Plan(info, target, c_ranges)
    if info.key:
        _verify_keyed(src, dst, pool, plan, result, max_keys, chunk_rows)
    else:
        result.notes.append("no primary key: order-independent checksum")
        _verify_unkeyed(src, dst, pool, plan, result, max_keys)
    return result
