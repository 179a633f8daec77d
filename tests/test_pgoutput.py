"""pgoutput decoding, from byte strings assembled by hand after PostgreSQL's "Logical Replication
Message Formats" (protocol-logicalrep-message-formats)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import struct
from datetime import UTC, datetime

import pytest

from capture.source.messages import (
    UNCHANGED,
    Begin,
    BeginPrepare,
    Commit,
    CommitPrepared,
    Delete,
    Insert,
    Message,
    Origin,
    Prepare,
    ProtocolError,
    Relation,
    RelationColumn,
    RollbackPrepared,
    StreamAbort,
    StreamCommit,
    StreamPrepare,
    StreamStart,
    StreamStop,
    Truncate,
    Type,
    Update,
    pg_time_to_unix_micros,
    unix_micros_to_pg_time,
)
from capture.stream.pgoutput import parse, parse_streamed, streamed_xid


# --- encoders, written from the documentation, independent of the decoder ------------------
def i8(v: int) -> bytes:
    return struct.pack("!B", v)


def i16(v: int) -> bytes:
    return struct.pack("!h", v)


def i32(v: int) -> bytes:
    return struct.pack("!i", v)


def u32(v: int) -> bytes:
    return struct.pack("!I", v)


def i64(v: int) -> bytes:
    return struct.pack("!q", v)


def u64(v: int) -> bytes:
    return struct.pack("!Q", v)


def string(s: str) -> bytes:
    return s.encode() + b"\0"


def text(v: str | bytes) -> bytes:
    raw = v.encode() if isinstance(v, str) else v
    return b"t" + i32(len(raw)) + raw


def binary(v: bytes) -> bytes:
    return b"b" + i32(len(v)) + v


NULL = b"n"
TOAST = b"u"


def tupledata(*columns: bytes) -> bytes:
    return i16(len(columns)) + b"".join(columns)


LSN_BIG = 0xFFFF_FFFE_0000_0010  # above 2**63: LSNs are unsigned
TS = 784_111_777_123_456  # 2024-11-05 08:49:37.123456 UTC in microseconds since 2000-01-01


# --- protocol version 1 messages ------------------------------------------------------------
def test_begin():
    data = b"B" + u64(0x16_B374D848) + i64(TS) + u32(4_000_000_000)
    assert parse(data) == Begin(final_lsn=0x16_B374D848, commit_time=TS, xid=4_000_000_000)


def test_begin_keeps_times_before_2000_negative_and_lsns_unsigned():
    msg = parse(b"B" + u64(LSN_BIG) + i64(-1) + u32(7))
    assert msg == Begin(LSN_BIG, -1, 7)


def test_commit():
    data = b"C" + i8(0) + u64(0x1000) + u64(0x1038) + i64(TS)
    assert parse(data) == Commit(flags=0, lsn=0x1000, end_lsn=0x1038, commit_time=TS)


def test_origin():
    data = b"O" + u64(LSN_BIG) + string("node_a")
    assert parse(data) == Origin(lsn=LSN_BIG, name="node_a")


def test_relation_with_columns_keys_and_typmods():
    data = (
        b"R"
        + u32(16_385)
        + string("shop")
        + string("orders")
        + b"d"
        + i16(3)
        + i8(1)
        + string("id")
        + u32(20)
        + i32(-1)
        + i8(0)
        + string("code")
        + u32(1043)
        + i32(24)  # varchar(20)
        + i8(0)
        + string("prix €")
        + u32(1700)
        + i32((10 << 16 | 2) + 4)  # numeric(10,2)
    )
    assert parse(data) == Relation(
        oid=16_385,
        namespace="shop",
        name="orders",
        replica_identity="d",
        columns=(
            RelationColumn(key=True, name="id", type_oid=20, typmod=-1),
            RelationColumn(key=False, name="code", type_oid=1043, typmod=24),
            RelationColumn(key=False, name="prix €", type_oid=1700, typmod=655_366),
        ),
    )


@pytest.mark.parametrize("identity", ["d", "n", "f", "i"])
def test_relation_without_columns_and_each_replica_identity(identity):
    data = b"R" + u32(1) + string("") + string("empty") + identity.encode() + i16(0)
    assert parse(data) == Relation(1, "", "empty", identity, ())


def test_relation_with_unknown_replica_identity_is_refused():
    with pytest.raises(ProtocolError, match="replica identity 'x'"):
        parse(b"R" + u32(1) + string("s") + string("t") + b"x" + i16(0))


def test_type():
    data = b"Y" + u32(16_400) + string("public") + string("mood")
    assert parse(data) == Type(oid=16_400, namespace="public", name="mood")


def test_insert_with_every_kind_of_value():
    data = (
        b"I"
        + u32(16_385)
        + b"N"
        + tupledata(text("42"), NULL, TOAST, binary(b"\x00\x01\xff"), text(""), binary(b""))
    )
    msg = parse(data)
    assert msg == Insert(relation_oid=16_385, new=("42", None, UNCHANGED, b"\x00\x01\xff", "", b""))
    assert msg.new[2] is UNCHANGED
    assert type(msg.new[3]) is bytes and type(msg.new[0]) is str


def test_insert_into_a_table_without_columns():
    assert parse(b"I" + u32(9) + b"N" + tupledata()) == Insert(9, ())


def test_insert_with_non_ascii_text():
    values = ("héllo wörld", "日本語のテキスト", "emoji 🐘🚀", "ñ")
    msg = parse(b"I" + u32(1) + b"N" + tupledata(*(text(v) for v in values)))
    assert msg.new == values


def test_insert_with_long_values():
    long_text = "ab€" * 400_000  # 2.0 MB of UTF-8
    long_binary = bytes(range(256)) * 4096  # 1 MiB
    msg = parse(b"I" + u32(1) + b"N" + tupledata(text(long_text), binary(long_binary), NULL))
    assert msg.new == (long_text, long_binary, None)


def test_insert_with_many_columns():
    values = tuple(str(i) for i in range(1600))
    msg = parse(b"I" + u32(1) + b"N" + tupledata(*(text(v) for v in values)))
    assert msg.new == values


def test_update_without_old_tuple():
    data = b"U" + u32(5) + b"N" + tupledata(text("1"), TOAST, NULL)
    msg = parse(data)
    assert msg == Update(relation_oid=5, old=None, old_is_key=False, new=("1", UNCHANGED, None))


def test_update_with_old_key():
    data = (
        b"U" + u32(5) + b"K" + tupledata(text("1"), NULL) + b"N" + tupledata(text("2"), text("x"))
    )
    assert parse(data) == Update(5, ("1", None), True, ("2", "x"))


def test_update_with_old_full_row():
    old = tupledata(text("1"), text("before"), NULL)
    new = tupledata(text("1"), text("after"), binary(b"\x00"))
    msg = parse(b"U" + u32(5) + b"O" + old + b"N" + new)
    assert msg == Update(5, ("1", "before", None), False, ("1", "after", b"\x00"))


@pytest.mark.parametrize("marker", [b"X", b"n", b"t"])
def test_update_with_unknown_marker_is_refused(marker):
    with pytest.raises(ProtocolError, match="update with marker"):
        parse(b"U" + u32(5) + marker + tupledata(text("1")))


def test_update_whose_old_tuple_is_not_followed_by_new_is_refused():
    with pytest.raises(ProtocolError, match="update with marker b'K'"):
        parse(b"U" + u32(5) + b"O" + tupledata(text("1")) + b"K" + tupledata(text("1")))


def test_delete_with_key():
    msg = parse(b"D" + u32(7) + b"K" + tupledata(text("3"), NULL))
    assert msg == Delete(relation_oid=7, old=("3", None), old_is_key=True)


def test_delete_with_full_row():
    msg = parse(b"D" + u32(7) + b"O" + tupledata(text("3"), text("gone")))
    assert msg == Delete(relation_oid=7, old=("3", "gone"), old_is_key=False)


def test_delete_with_unknown_marker_is_refused():
    with pytest.raises(ProtocolError, match="delete with marker b'N'"):
        parse(b"D" + u32(7) + b"N" + tupledata(text("3")))


def test_insert_without_new_marker_is_refused():
    with pytest.raises(ProtocolError, match="insert without 'N'"):
        parse(b"I" + u32(7) + b"K" + tupledata(text("3")))


@pytest.mark.parametrize(
    ("options", "cascade", "restart"),
    [(0, False, False), (1, True, False), (2, False, True), (3, True, True)],
)
def test_truncate(options, cascade, restart):
    data = b"T" + u32(3) + i8(options) + u32(16_385) + u32(16_390) + u32(4_294_967_295)
    assert parse(data) == Truncate(
        relation_oids=(16_385, 16_390, 4_294_967_295), cascade=cascade, restart_identity=restart
    )


def test_truncate_of_no_relations():
    assert parse(b"T" + u32(0) + i8(0)) == Truncate((), False, False)


def test_transactional_message():
    data = b"M" + i8(1) + u64(0x2000) + string("bottler") + i32(5) + b"hello"
    assert parse(data) == Message(
        transactional=True, lsn=0x2000, prefix="bottler", content=b"hello"
    )


def test_non_transactional_message_with_binary_and_empty_content():
    data = b"M" + i8(0) + u64(1) + string("préfixe") + i32(3) + b"\x00\xff\x00"
    assert parse(data) == Message(False, 1, "préfixe", b"\x00\xff\x00")
    empty = b"M" + i8(0) + u64(1) + string("") + i32(0)
    assert parse(empty) == Message(False, 1, "", b"")


# --- streamed and two-phase messages (protocol versions 2 to 4) -----------------------------
def test_stream_start_stop_commit_abort():
    assert parse(b"S" + u32(700) + i8(1)) == StreamStart(xid=700, first_segment=True)
    assert parse(b"S" + u32(700) + i8(0)) == StreamStart(xid=700, first_segment=False)
    assert parse(b"E") == StreamStop()
    commit = b"c" + u32(700) + i8(0) + u64(0x3000) + u64(0x3050) + i64(TS)
    assert parse(commit) == StreamCommit(
        xid=700, flags=0, lsn=0x3000, end_lsn=0x3050, commit_time=TS
    )
    assert parse(b"A" + u32(700) + u32(701)) == StreamAbort(700, 701, None, None)
    parallel = b"A" + u32(700) + u32(700) + u64(0x4000) + i64(TS)
    assert parse(parallel) == StreamAbort(xid=700, subxid=700, abort_lsn=0x4000, abort_time=TS)


def test_two_phase_messages():
    gid = string("tx-1 ✓")
    assert parse(b"b" + u64(10) + u64(20) + i64(TS) + u32(9) + gid) == BeginPrepare(
        prepare_lsn=10, end_lsn=20, prepare_time=TS, xid=9, gid="tx-1 ✓"
    )
    assert parse(b"P" + i8(0) + u64(10) + u64(20) + i64(TS) + u32(9) + gid) == Prepare(
        0, 10, 20, TS, 9, "tx-1 ✓"
    )
    assert parse(b"K" + i8(0) + u64(30) + u64(40) + i64(TS + 1) + u32(9) + gid) == (
        CommitPrepared(flags=0, lsn=30, end_lsn=40, commit_time=TS + 1, xid=9, gid="tx-1 ✓")
    )
    rollback = b"r" + i8(0) + u64(20) + u64(50) + i64(TS) + i64(TS + 2) + u32(9) + gid
    assert parse(rollback) == RollbackPrepared(0, 20, 50, TS, TS + 2, 9, "tx-1 ✓")
    assert parse(b"p" + i8(0) + u64(10) + u64(20) + i64(TS) + u32(9) + gid) == StreamPrepare(
        0, 10, 20, TS, 9, "tx-1 ✓"
    )


def test_streamed_changes_carry_their_xid():
    insert = b"I" + u32(701) + u32(5) + b"N" + tupledata(text("1"), TOAST)
    assert parse_streamed(insert) == (701, Insert(5, ("1", UNCHANGED)))
    update = b"U" + u32(701) + u32(5) + b"K" + tupledata(text("1")) + b"N" + tupledata(text("2"))
    assert parse_streamed(update) == (701, Update(5, ("1",), True, ("2",)))
    delete = b"D" + u32(702) + u32(5) + b"O" + tupledata(text("2"))
    assert parse_streamed(delete) == (702, Delete(5, ("2",), False))
    relation = b"R" + u32(701) + u32(5) + string("s") + string("t") + b"f" + i16(0)
    assert parse_streamed(relation) == (701, Relation(5, "s", "t", "f", ()))
    typ = b"Y" + u32(701) + u32(6) + string("s") + string("mood")
    assert parse_streamed(typ) == (701, Type(6, "s", "mood"))
    truncate = b"T" + u32(701) + u32(1) + i8(2) + u32(5)
    assert parse_streamed(truncate) == (701, Truncate((5,), False, True))
    message = b"M" + u32(701) + i8(1) + u64(9) + string("p") + i32(1) + b"x"
    assert parse_streamed(message) == (701, Message(True, 9, "p", b"x"))
    # The origin after a Stream Start has no xid.
    assert parse_streamed(b"O" + u64(1) + string("o")) == (None, Origin(1, "o"))


def test_streamed_xid_reads_only_the_xid_as_parse_streamed_does():
    """The capture stages a streamed change as it came, reading only its xid (streamed_xid):
    the same xid parse_streamed gives, None where it gives None."""
    insert = b"I" + u32(701) + u32(5) + b"N" + tupledata(text("1"))
    relation = b"R" + u32(702) + u32(5) + string("s") + string("t") + b"f" + i16(0)
    message = b"M" + u32(703) + i8(1) + u64(9) + string("p") + i32(1) + b"x"
    for data in (insert, relation, message, b"O" + u64(1) + string("o"), b"E"):
        assert streamed_xid(data) == parse_streamed(data)[0]
    with pytest.raises(ProtocolError, match="truncated"):
        streamed_xid(b"I" + u32(701)[:2])


def test_streamed_parse_passes_messages_without_xid_through():
    assert parse_streamed(b"E") == (None, StreamStop())
    assert parse_streamed(b"c" + u32(1) + i8(0) + u64(1) + u64(2) + i64(3)) == (
        None,
        StreamCommit(1, 0, 1, 2, 3),
    )
    with pytest.raises(
        ProtocolError, match=r"unknown pgoutput message type b'X' \(0x58\), 5 bytes"
    ):
        parse_streamed(b"X" + u32(1))
    with pytest.raises(ProtocolError, match="truncated"):
        parse_streamed(b"I" + u32(701)[:2])
    with pytest.raises(ProtocolError, match="empty"):
        parse_streamed(b"")


# --- robustness -----------------------------------------------------------------------------
SAMPLES = {
    "begin": b"B" + u64(1) + i64(TS) + u32(5),
    "commit": b"C" + i8(0) + u64(1) + u64(2) + i64(TS),
    "origin": b"O" + u64(1) + string("node"),
    "relation": b"R"
    + u32(1)
    + string("s")
    + string("t")
    + b"d"
    + i16(2)
    + i8(1)
    + string("id")
    + u32(23)
    + i32(-1)
    + i8(0)
    + string("v")
    + u32(25)
    + i32(-1),
    "type": b"Y" + u32(1) + string("s") + string("mood"),
    "insert": b"I" + u32(1) + b"N" + tupledata(text("1"), NULL, TOAST, binary(b"\x01\x02")),
    "insert_null_last": b"I" + u32(1) + b"N" + tupledata(text("1"), NULL),
    "insert_toast_last": b"I" + u32(1) + b"N" + tupledata(text("1"), TOAST),
    "update": b"U"
    + u32(1)
    + b"O"
    + tupledata(text("1"), NULL)
    + b"N"
    + tupledata(text("1"), text("x")),
    "update_new_only": b"U" + u32(1) + b"N" + tupledata(text("1"), TOAST),
    "delete": b"D" + u32(1) + b"K" + tupledata(text("1"), NULL),
    "truncate": b"T" + u32(2) + i8(1) + u32(1) + u32(2),
    "message": b"M" + i8(1) + u64(1) + string("p") + i32(3) + b"abc",
    "stream_start": b"S" + u32(1) + i8(1),
    "stream_commit": b"c" + u32(1) + i8(0) + u64(1) + u64(2) + i64(TS),
    "stream_abort": b"A" + u32(1) + u32(2),
    "begin_prepare": b"b" + u64(1) + u64(2) + i64(TS) + u32(3) + string("g"),
    "prepare": b"P" + i8(0) + u64(1) + u64(2) + i64(TS) + u32(3) + string("g"),
    "commit_prepared": b"K" + i8(0) + u64(1) + u64(2) + i64(TS) + u32(3) + string("g"),
    "rollback_prepared": b"r" + i8(0) + u64(1) + u64(2) + i64(TS) + i64(TS) + u32(3) + string("g"),
    "stream_prepare": b"p" + i8(0) + u64(1) + u64(2) + i64(TS) + u32(3) + string("g"),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_every_truncation_of_a_message_is_a_protocol_error(name):
    data = SAMPLES[name]
    parse(data)  # whole, it is valid
    for cut in range(len(data)):
        with pytest.raises(ProtocolError):
            parse(data[:cut])


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_trailing_bytes_are_a_protocol_error(name):
    with pytest.raises(ProtocolError, match="overlong|malformed"):
        parse(SAMPLES[name] + b"\x00")


def test_a_truncated_text_value_names_the_message_and_its_length():
    data = b"I" + u32(1) + b"N" + tupledata(text("hello world"))
    with pytest.raises(ProtocolError, match=r"truncated pgoutput message b'I' \(21 bytes\)"):
        parse(data[:-3])


def test_a_value_longer_than_the_message_is_a_protocol_error():
    data = b"I" + u32(1) + b"N" + i16(1) + b"t" + u32(0xFFFF_FFFF) + b"abc"
    with pytest.raises(ProtocolError, match="truncated"):
        parse(data)


def test_stream_abort_of_parallel_form_cut_to_the_short_form_reads_as_the_short_form():
    # The two forms differ only by length (version 4 with streaming = parallel adds 16 bytes).
    parallel = b"A" + u32(1) + u32(2) + u64(3) + i64(4)
    assert parse(parallel[:9]) == StreamAbort(1, 2)
    for cut in (10, 17, 24):
        with pytest.raises(ProtocolError):
            parse(parallel[:cut])


def test_unknown_message_type_names_the_byte_and_the_length():
    with pytest.raises(
        ProtocolError, match=r"unknown pgoutput message type b'Z' \(0x5a\), 4 bytes"
    ):
        parse(b"Z\x00\x00\x00")
    with pytest.raises(ProtocolError, match=r"b'\\xff' \(0xff\), 1 bytes"):
        parse(b"\xff")


def test_empty_message():
    with pytest.raises(ProtocolError, match="empty"):
        parse(b"")


def test_unknown_tuple_kind():
    with pytest.raises(ProtocolError, match=r"unknown tuple data kind b'x' for column 1"):
        parse(b"I" + u32(1) + b"N" + tupledata(text("1"), b"x"))


def test_text_that_is_not_utf8():
    with pytest.raises(ProtocolError, match="not UTF-8"):
        parse(b"I" + u32(1) + b"N" + tupledata(text(b"\xff\xfe")))


def test_unterminated_string():
    with pytest.raises(ProtocolError, match="truncated or malformed"):
        parse(b"O" + u64(1) + b"no terminator")


def test_protocol_error_is_a_value_error():
    assert issubclass(ProtocolError, ValueError)


def test_bytearray_and_memoryview_input():
    data = SAMPLES["insert"]
    expected = parse(data)
    assert parse(bytearray(data)) == expected
    assert parse(memoryview(data)) == expected
    assert parse(memoryview(b"xx" + data)[2:]) == expected  # a view into a larger buffer
    assert parse_streamed(memoryview(b"I" + u32(4) + data[1:])) == (4, expected)


# --- values and classes ---------------------------------------------------------------------
def test_unchanged_is_a_unique_sentinel():
    assert repr(UNCHANGED) == "UNCHANGED"
    assert type(UNCHANGED)() is UNCHANGED
    assert copy.copy(UNCHANGED) is UNCHANGED
    assert copy.deepcopy(UNCHANGED) is UNCHANGED
    assert pickle.loads(pickle.dumps(UNCHANGED)) is UNCHANGED
    assert UNCHANGED != None  # noqa: E711 - the point is that it is not None
    assert UNCHANGED not in ("", b"", "UNCHANGED", 0)


def test_messages_are_frozen_slotted_and_hashable():
    for data in SAMPLES.values():
        msg = parse(data)
        assert dataclasses.is_dataclass(msg)
        assert not hasattr(msg, "__dict__")
        field = dataclasses.fields(msg)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(msg, field, 0)
        assert hash(msg) == hash(parse(data))


def test_fast_built_rows_equal_constructed_ones():
    insert = parse(SAMPLES["insert"])
    assert insert == Insert(1, ("1", None, UNCHANGED, b"\x01\x02"))
    assert repr(insert) == "Insert(relation_oid=1, new=('1', None, UNCHANGED, b'\\x01\\x02'))"
    assert hash(parse(SAMPLES["update"])) == hash(Update(1, ("1", None), False, ("1", "x")))
    assert parse(SAMPLES["delete"]) == Delete(1, ("1", None), True)


# --- times -------------------------------------------------------------------------
def test_pg_time_to_unix_micros():
    assert pg_time_to_unix_micros(0) == int(datetime(2000, 1, 1, tzinfo=UTC).timestamp()) * 10**6
    when = datetime(2024, 11, 5, 8, 49, 37, 123_456, tzinfo=UTC)
    unix = pg_time_to_unix_micros(TS)
    assert datetime.fromtimestamp(unix // 10**6, UTC).replace(microsecond=unix % 10**6) == when
    assert unix_micros_to_pg_time(unix) == TS
