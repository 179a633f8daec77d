"""pgoutput decoding against a real PostgreSQL: changes made through SQL, read back raw from a
logical slot with ``pg_logical_slot_get_binary_changes`` and decoded by
``capture.stream.pgoutput``."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, field

import psycopg
import pytest

from capture.source.messages import (
    UNCHANGED,
    Begin,
    Commit,
    Delete,
    Insert,
    Message,
    Relation,
    RelationColumn,
    StreamAbort,
    StreamCommit,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
    pg_time_to_unix_micros,
)
from capture.stream.pgoutput import parse, parse_streamed
from common.lsn import Lsn

pytestmark = [pytest.mark.stack, pytest.mark.pg_matrix]

INT4, INT8, TEXT, NUMERIC, VARCHAR, BYTEA = 23, 20, 25, 1700, 1043, 17


class _AnyInt:
    """Equal to any int: stands for LSNs and times in expected messages (checked apart)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, int) and not isinstance(other, bool)

    def __repr__(self) -> str:
        return "ANY"


ANY = _AnyInt()


@dataclass
class Scratch:
    """A uniquely named schema, publication and slots; all dropped at teardown."""

    conn: psycopg.Connection
    name: str
    slots: list[str] = field(default_factory=list)

    def oid(self, table: str) -> int:
        return self.conn.execute(
            "select %s::regclass::oid::bigint", [f"{self.name}.{table}"]
        ).fetchone()[0]

    def create_slot(self) -> tuple[str, int]:
        slot = self.name
        self.slots.append(slot)
        (lsn,) = self.conn.execute(
            "select lsn::text from pg_create_logical_replication_slot(%s, 'pgoutput')", [slot]
        ).fetchone()
        return slot, Lsn.parse(lsn)

    def txn(self, *statements: str) -> Txn:
        """Run statements in one committed transaction; note its xid and the WAL around it."""
        before = self.wal_and_clock()
        with self.conn.transaction():
            (xid,) = self.conn.execute("select pg_current_xact_id()::text::bigint").fetchone()
            for statement in statements:
                self.conn.execute(statement)
        return Txn(xid % 2**32, *before, *self.wal_and_clock())

    def wal_and_clock(self) -> tuple[int, int]:
        lsn, micros = self.conn.execute(
            "select pg_current_wal_insert_lsn()::text,"
            " (extract(epoch from clock_timestamp()) * 1000000)::bigint"
        ).fetchone()
        return Lsn.parse(lsn), micros

    def changes(self, slot: str, *options: str) -> list[bytes]:
        rows = self.conn.execute(
            "select data from pg_logical_slot_get_binary_changes(%s, NULL, NULL"
            + ", %s" * len(options)
            + ")",
            [slot, *options],
        ).fetchall()
        return [row[0] for row in rows]


@dataclass
class Txn:
    xid: int
    lsn_before: int
    time_before: int
    lsn_after: int
    time_after: int


@pytest.fixture
def scratch(stack) -> Iterator[Scratch]:
    name = f"pgo_{secrets.token_hex(5)}"
    conn = psycopg.connect(stack.pg_dsn, autocommit=True)
    conn.execute(f"create schema {name}")
    scratch = Scratch(conn, name)
    try:
        yield scratch
    finally:
        for slot in scratch.slots:
            conn.execute(
                "select pg_drop_replication_slot(slot_name) from pg_replication_slots"
                " where slot_name = %s",
                [slot],
            )
        conn.execute(f"drop publication if exists {name}")
        conn.execute(f"drop schema {name} cascade")
        conn.close()


def test_protocol_v1_stream_decodes_exactly(scratch):
    s = scratch.name
    conn = scratch.conn
    conn.execute(f"""
        create type {s}.mood as enum ('sad', 'happy');
        create table {s}.keyed (
            id int primary key, name text, price numeric(10,2), tag varchar(20), mood {s}.mood);
        create table {s}.full_t (id int, note text);
        alter table {s}.full_t replica identity full;
        create table {s}.nocols ();
        create table {s}.toasty (id int primary key, counter int not null, body text);
        alter table {s}.toasty alter column body set storage external;
        create publication {s} for table {s}.keyed, {s}.full_t, {s}.nocols, {s}.toasty;
    """)
    keyed, full_t, nocols, toasty = (
        scratch.oid(t) for t in ("keyed", "full_t", "nocols", "toasty")
    )
    (mood,) = conn.execute(f"select '{s}.mood'::regtype::oid::bigint").fetchone()
    slot, slot_lsn = scratch.create_slot()
    big = "".join(secrets.token_hex(16) for _ in range(640))  # 20 480 bytes, stored out of line

    t1 = scratch.txn(
        f"insert into {s}.keyed values (1, 'Widget', 9.99, 'a', 'happy'),"
        " (2, 'Gädget ☃ 日本', null, null, null)"
    )
    t2 = scratch.txn(
        f"insert into {s}.full_t values (1, 'one'), (2, 'two')",
        f"insert into {s}.nocols default values",
        f"insert into {s}.toasty values (1, 0, '{big}')",
    )
    t3 = scratch.txn(f"update {s}.toasty set counter = 1 where id = 1")  # body stays in TOAST
    t4 = scratch.txn(
        f"update {s}.keyed set name = 'Widget 2' where id = 1",
        f"update {s}.keyed set id = 10 where id = 2",  # the key changes: old key is sent
    )
    t5 = scratch.txn(f"update {s}.full_t set note = 'uno' where id = 1")
    t6 = scratch.txn(f"delete from {s}.keyed where id = 10", f"delete from {s}.full_t where id = 2")
    with conn.transaction(force_rollback=True):
        conn.execute(f"insert into {s}.keyed values (99, 'never')")
        conn.execute(f"update {s}.full_t set note = 'never' where id = 1")
        conn.execute("select pg_logical_emit_message(true, 'bottler', 'never')")
    t7 = scratch.txn(f"truncate {s}.full_t, {s}.nocols restart identity")
    t8 = scratch.txn("select pg_logical_emit_message(true, 'bottler', 'hello')")
    t9 = scratch.txn(
        f"insert into {s}.keyed values (3, 'after', 1.5, 'b', 'sad')",
        "select pg_logical_emit_message(false, 'bottler', 'side ✓')",
    )

    raw = scratch.changes(slot, "proto_version", "1", "publication_names", s, "messages", "true")
    got = [parse(data) for data in raw]

    def begin(t: Txn) -> Begin:
        return Begin(ANY, ANY, t.xid)

    commit = Commit(0, ANY, ANY, ANY)
    keyed_relation = Relation(
        keyed,
        s,
        "keyed",
        "d",
        (
            RelationColumn(True, "id", INT4, -1),
            RelationColumn(False, "name", TEXT, -1),
            RelationColumn(False, "price", NUMERIC, (10 << 16 | 2) + 4),
            RelationColumn(False, "tag", VARCHAR, 20 + 4),
            RelationColumn(False, "mood", mood, -1),
        ),
    )
    full_t_relation = Relation(
        full_t,
        s,
        "full_t",
        "f",
        (RelationColumn(True, "id", INT4, -1), RelationColumn(True, "note", TEXT, -1)),
    )
    nocols_relation = Relation(nocols, s, "nocols", "d", ())
    expected = [
        begin(t1),
        Type(mood, s, "mood"),
        keyed_relation,
        Insert(keyed, ("1", "Widget", "9.99", "a", "happy")),
        Insert(keyed, ("2", "Gädget ☃ 日本", None, None, None)),
        commit,
        begin(t2),
        full_t_relation,
        Insert(full_t, ("1", "one")),
        Insert(full_t, ("2", "two")),
        nocols_relation,
        Insert(nocols, ()),
        Relation(
            toasty,
            s,
            "toasty",
            "d",
            (
                RelationColumn(True, "id", INT4, -1),
                RelationColumn(False, "counter", INT4, -1),
                RelationColumn(False, "body", TEXT, -1),
            ),
        ),
        Insert(toasty, ("1", "0", big)),
        commit,
        begin(t3),
        Update(toasty, None, False, ("1", "1", UNCHANGED)),
        commit,
        begin(t4),
        Update(keyed, None, False, ("1", "Widget 2", "9.99", "a", "happy")),
        Update(
            keyed, ("2", None, None, None, None), True, ("10", "Gädget ☃ 日本", None, None, None)
        ),
        commit,
        begin(t5),
        Update(full_t, ("1", "one"), False, ("1", "uno")),
        commit,
        begin(t6),
        Delete(keyed, ("10", None, None, None, None), True),
        Delete(full_t, ("2", "two"), False),
        commit,
        begin(t7),
        # TRUNCATE gives the tables new files, which invalidates what pgoutput knows of them:
        # it describes them again before the Truncate.
        full_t_relation,
        nocols_relation,
        Truncate((full_t, nocols), cascade=False, restart_identity=True),
        commit,
        begin(t8),
        Message(True, ANY, "bottler", b"hello"),
        commit,
        # Version 1 sends a transaction whole at its commit; a non-transactional message is sent
        # when it is decoded, so it comes before the transaction that emitted it.
        Message(False, ANY, "bottler", "side ✓".encode()),
        begin(t9),
        Insert(keyed, ("3", "after", "1.50", "b", "sad")),
        commit,
    ]
    assert got == expected
    toast_update = next(m for m in got if isinstance(m, Update) and m.relation_oid == toasty)
    assert toast_update.new[2] is UNCHANGED  # the sentinel itself, not just something equal

    # LSNs and times, transaction by transaction.
    txns = [t1, t2, t3, t4, t5, t6, t7, t8, t9]
    begins = [m for m in got if isinstance(m, Begin)]
    commits = [m for m in got if isinstance(m, Commit)]
    assert len(begins) == len(commits) == len(txns)
    previous_end = slot_lsn
    for t, b, c in zip(txns, begins, commits, strict=True):
        assert b.final_lsn == c.lsn  # Begin announces the commit record's LSN
        assert b.commit_time == c.commit_time
        assert previous_end <= t.lsn_before < c.lsn < c.end_lsn <= t.lsn_after
        assert t.time_before <= pg_time_to_unix_micros(c.commit_time) <= t.time_after
        previous_end = c.end_lsn
    commit_lsns = [c.lsn for c in commits]
    assert commit_lsns == sorted(set(commit_lsns))  # strictly increasing
    hello, side = (m for m in got if isinstance(m, Message))
    # A message's LSN is the end of its WAL record: here, where the commit record starts.
    assert t8.lsn_before < hello.lsn <= commits[7].lsn
    assert t9.lsn_before < side.lsn <= commits[8].lsn


def test_lsn_text_form_matches_postgres(scratch):
    lsn_text, lsn_number = scratch.conn.execute(
        "select pg_current_wal_lsn()::text, (pg_current_wal_lsn() - '0/0')::text"
    ).fetchone()
    assert str(Lsn(int(lsn_number))) == lsn_text
    assert Lsn.parse(lsn_text) == int(lsn_number)
    (high,) = scratch.conn.execute("select ('FFFFFFFF/FFFFFFFF'::pg_lsn - '0/0')::text").fetchone()
    assert str(Lsn(int(high))) == "FFFFFFFF/FFFFFFFF"


def test_binary_option_sends_binary_values(scratch):
    s = scratch.name
    scratch.conn.execute(f"""
        create table {s}.bin_t (id int primary key, label text, blob bytea, missing int8);
        create publication {s} for table {s}.bin_t;
    """)
    bin_t = scratch.oid("bin_t")
    slot, _ = scratch.create_slot()
    t = scratch.txn(f"insert into {s}.bin_t values (7, 'héllo', '\\x00ff00', null)")

    raw = scratch.changes(slot, "proto_version", "1", "publication_names", s, "binary", "true")
    got = [parse(data) for data in raw]

    assert got == [
        Begin(ANY, ANY, t.xid),
        Relation(
            bin_t,
            s,
            "bin_t",
            "d",
            (
                RelationColumn(True, "id", INT4, -1),
                RelationColumn(False, "label", TEXT, -1),
                RelationColumn(False, "blob", BYTEA, -1),
                RelationColumn(False, "missing", INT8, -1),
            ),
        ),
        # Each type's binary send format: int4 big-endian, text as UTF-8, bytea raw.
        Insert(bin_t, (b"\x00\x00\x00\x07", "héllo".encode(), b"\x00\xff\x00", None)),
        Commit(0, ANY, ANY, ANY),
    ]


def test_protocol_v2_streams_large_transactions(scratch):
    """Version 2 with streaming: a transaction larger than logical_decoding_work_mem is sent in
    blocks while it runs, changes carrying their xid, then committed or aborted."""
    s = scratch.name
    conn = scratch.conn
    conn.execute(f"""
        create table {s}.big (id int primary key, payload text);
        create publication {s} for table {s}.big;
    """)
    big = scratch.oid("big")
    slot, _ = scratch.create_slot()
    rows = 3000  # about 400 kB of changes: several times the 64 kB limit set below
    committed = scratch.txn(
        f"insert into {s}.big select i, repeat(md5(i::text), 3) from generate_series(1, {rows}) i"
    )
    with conn.transaction(force_rollback=True):
        (aborted_xid,) = conn.execute("select pg_current_xact_id()::text::bigint").fetchone()
        conn.execute(
            f"insert into {s}.big select i, 'doomed' from generate_series({rows + 1}, {2 * rows}) i"
        )
    # An abort record is not flushed at once, and decoding stops at the flushed end of WAL: a
    # transaction that writes WAL flushes it at commit (pgoutput sends nothing of this one:
    # messages were not asked for, and version 15 on skips empty transactions).
    conn.execute("select pg_logical_emit_message(true, 'flush', '')")
    conn.execute("set logical_decoding_work_mem = '64kB'")
    raw = scratch.changes(slot, "proto_version", "2", "publication_names", s, "streaming", "on")

    by_xid: dict[int, list] = {}
    outside: list = []
    in_block = None  # the xid of the Stream Start we are in
    for data in raw:
        if in_block is None:
            msg = parse(data)
            outside.append(msg)
            if isinstance(msg, StreamStart):
                in_block = msg.xid
            continue
        xid, msg = parse_streamed(data)
        if isinstance(msg, StreamStop):
            outside.append(msg)
            in_block = None
            continue
        assert xid == in_block  # no subtransactions here: every change is the block's xid
        by_xid.setdefault(xid, []).append(msg)

    assert in_block is None
    assert set(by_xid) <= {committed.xid, aborted_xid}
    inserted = [m for m in by_xid[committed.xid] if isinstance(m, Insert)]
    expected_rows = [
        (str(i), hashlib.md5(str(i).encode()).hexdigest() * 3) for i in range(1, rows + 1)
    ]
    assert [m.new for m in inserted] == expected_rows
    assert {m.relation_oid for m in inserted} == {big}
    relations = [m for m in by_xid[committed.xid] if isinstance(m, Relation)]
    assert [r.name for r in relations] == ["big"]
    # Decoding ran after the rollback: PostgreSQL notices the abort when it next reads the
    # catalog for the transaction and stops streaming it, so how many rows went out may vary.
    doomed = [m for m in by_xid.get(aborted_xid, []) if isinstance(m, Insert)]
    assert all(m.new[1] == "doomed" for m in doomed)

    starts = [m for m in outside if isinstance(m, StreamStart)]
    assert len(starts) > 2  # really streamed, in several blocks
    assert [m.first_segment for m in starts if m.xid == committed.xid][0] is True
    # PostgreSQL 18 on looks for the abort record first and sends nothing of a transaction
    # that had aborted when decoding reached it; before 18 it streams it, then aborts it.
    aborted_streamed = conn.info.server_version < 180000
    assert sum(m.first_segment for m in starts) == 1 + aborted_streamed  # one per transaction
    ends = [m for m in outside if not isinstance(m, (StreamStart, StreamStop))]
    assert len(ends) == 1 + aborted_streamed
    commit = ends[0]
    assert isinstance(commit, StreamCommit) and commit.xid == committed.xid
    assert committed.lsn_before < commit.lsn < commit.end_lsn <= committed.lsn_after
    if aborted_streamed:
        assert ends[1] == StreamAbort(aborted_xid, aborted_xid)
    else:
        assert aborted_xid not in by_xid
