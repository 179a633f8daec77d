"""Decoder for the binary messages of PostgreSQL's built-in ``pgoutput`` logical decoding plugin.

The format is documented in PostgreSQL's "Logical Replication Message Formats"
(protocol-logicalrep-message-formats). Protocol version 1 is decoded exactly: Begin, Commit,
Origin, Relation, Type, Insert, Update, Delete, Truncate and logical decoding messages (the
capture asks for version 1, or with streaming for the server's newest, capture/stream/streamer.py).
The self-describing messages of later versions (Stream Start/Stop/Commit/Abort
from version 2, the two-phase messages from version 3, the Stream Abort tail of version 4) are
decoded by :func:`parse` as well; changes sent *inside* a streamed block carry a leading xid and
are decoded with :func:`parse_streamed`.

The messages are the dataclasses of capture/source/messages.py. Tuple data becomes a tuple
with one entry per column: ``None`` for SQL NULL, :data:`UNCHANGED` for an unchanged TOASTed
value the server did not send, ``str`` for text format (decoded as UTF-8, the encoding of the
source database) and ``bytes`` for binary format.

Every change goes through here, so the code is written for speed: one dispatch by tuple index on
the first byte, precompiled :class:`struct.Struct` objects read at offsets (``unpack_from``), the
only copies being the values handed out, and a single length check per message instead of one
per field (a truncated or overlong message is detected because the offset does not end exactly at
the end of the message). A ``memoryview`` or ``bytearray`` argument is copied to ``bytes`` once:
measured, slicing plus ``bytes.decode`` on ``bytes`` beats ``str(memoryview_slice, "utf-8")``
by about a third, which pays for that one copy many times over.
"""

from __future__ import annotations

import struct
from dataclasses import fields
from typing import Final

from capture.source.messages import (
    UNCHANGED,
    AnyMessage,
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
)

__all__ = [
    "STREAM_STOP",
    "parse",
    "parse_streamed",
    "streamed_xid",
]


# --- decoding --------------------------------------------------------------------------------
# Network byte order throughout. Int64 LSNs are unsigned, timestamps signed; Int32 oids and xids
# unsigned; typmod signed.
_unpack_u16 = struct.Struct("!H").unpack_from
_unpack_u32 = struct.Struct("!I").unpack_from
_unpack_u64 = struct.Struct("!Q").unpack_from
_unpack_begin = struct.Struct("!QqI").unpack_from
_unpack_commit = struct.Struct("!BQQq").unpack_from
_unpack_u32_u8 = struct.Struct("!IB").unpack_from
_unpack_kind_len = struct.Struct("!BI").unpack_from
_unpack_u8_u16 = struct.Struct("!BH").unpack_from
_unpack_u32_i32 = struct.Struct("!Ii").unpack_from
_unpack_u8_u64 = struct.Struct("!BQ").unpack_from
_unpack_u32_u32 = struct.Struct("!II").unpack_from
_unpack_u32_u32_u64_i64 = struct.Struct("!IIQq").unpack_from
_unpack_stream_commit = struct.Struct("!IBQQq").unpack_from
_unpack_begin_prepare = struct.Struct("!QQqI").unpack_from
_unpack_prepare = struct.Struct("!BQQqI").unpack_from
_unpack_rollback_prepared = struct.Struct("!BQQqqI").unpack_from

_N, _U, _T, _B = b"nutb"  # tuple data kinds as ints
_K, _O, _NEW = b"KON"  # tuple markers as ints


# Bypass the frozen dataclass __init__ (which sets each field through object.__setattr__) for
# the per-row messages: the same objects, about 40% cheaper to build. Everything else, rare,
# goes through the ordinary constructors.
def _slot_setters(cls: type, *names: str) -> tuple:
    if tuple(f.name for f in fields(cls)) != names:  # a field was added: update the fast paths
        raise TypeError(f"{cls.__name__} fields changed: {[f.name for f in fields(cls)]}")
    return tuple(cls.__dict__[name].__set__ for name in names)


_new = object.__new__
_set_insert_oid, _set_insert_new = _slot_setters(Insert, "relation_oid", "new")
_set_update_oid, _set_update_old, _set_update_old_is_key, _set_update_new = _slot_setters(
    Update, "relation_oid", "old", "old_is_key", "new"
)
_set_delete_oid, _set_delete_old, _set_delete_old_is_key = _slot_setters(
    Delete, "relation_oid", "old", "old_is_key"
)


def _read_tuple(data: bytes, off: int) -> tuple[tuple, int]:
    """TupleData at ``off`` → (values, offset after it)."""
    (n,) = _unpack_u16(data, off)
    off += 2
    values = [None] * n
    for i in range(n):
        try:  # kind and length in one call; 'n' and 'u' have no length and may end the data
            kind, size = _unpack_kind_len(data, off)
        except struct.error:
            kind = data[off]
            size = 0
        if kind == _T:
            off += 5
            end = off + size
            values[i] = data[off:end].decode()
            off = end
        elif kind == _N:
            off += 1
        elif kind == _U:
            values[i] = UNCHANGED
            off += 1
        elif kind == _B:
            off += 5
            end = off + size
            values[i] = data[off:end]
            off = end
        else:
            raise ProtocolError(
                f"unknown tuple data kind {bytes([kind])!r} for column {i} at offset {off}"
            )
    return tuple(values), off


def _read_str(data: bytes, off: int) -> tuple[str, int]:
    """NUL-terminated String at ``off`` → (text, offset after the NUL)."""
    end = data.index(0, off)
    return data[off:end].decode(), end + 1


def _check_end(data: bytes, off: int) -> None:
    if off != len(data):
        raise ProtocolError(_describe(data, "truncated" if off > len(data) else "overlong"))


def _describe(data: bytes, what: str) -> str:
    more = "…" if len(data) > 32 else ""
    return f"{what} pgoutput message {data[:1]!r} ({len(data)} bytes): {data[:32].hex()}{more}"


def _insert(data: bytes, off: int = 1) -> Insert:
    oid, marker = _unpack_u32_u8(data, off)
    if marker != _NEW:
        raise ProtocolError(_describe(data, f"insert without 'N' (got {bytes([marker])!r}) in"))
    new, off = _read_tuple(data, off + 5)
    if off != len(data):
        _check_end(data, off)
    msg = _new(Insert)
    _set_insert_oid(msg, oid)
    _set_insert_new(msg, new)
    return msg


def _update(data: bytes, off: int = 1) -> Update:
    oid, marker = _unpack_u32_u8(data, off)
    off += 5
    old = None
    old_is_key = False
    if marker in (_K, _O):
        old_is_key = marker == _K
        old, off = _read_tuple(data, off)
        marker = data[off]
        off += 1
    if marker != _NEW:
        raise ProtocolError(_describe(data, f"update with marker {bytes([marker])!r} in"))
    new, off = _read_tuple(data, off)
    if off != len(data):
        _check_end(data, off)
    msg = _new(Update)
    _set_update_oid(msg, oid)
    _set_update_old(msg, old)
    _set_update_old_is_key(msg, old_is_key)
    _set_update_new(msg, new)
    return msg


def _delete(data: bytes, off: int = 1) -> Delete:
    oid, marker = _unpack_u32_u8(data, off)
    if marker not in (_K, _O):
        raise ProtocolError(_describe(data, f"delete with marker {bytes([marker])!r} in"))
    old, off = _read_tuple(data, off + 5)
    if off != len(data):
        _check_end(data, off)
    msg = _new(Delete)
    _set_delete_oid(msg, oid)
    _set_delete_old(msg, old)
    _set_delete_old_is_key(msg, marker == _K)
    return msg


def _begin_msg(data: bytes, off: int = 1) -> Begin:
    _check_end(data, off + 20)
    return Begin(*_unpack_begin(data, off))


def _commit_msg(data: bytes, off: int = 1) -> Commit:
    _check_end(data, off + 25)
    return Commit(*_unpack_commit(data, off))


def _origin(data: bytes, off: int = 1) -> Origin:
    (lsn,) = _unpack_u64(data, off)
    name, off = _read_str(data, off + 8)
    _check_end(data, off)
    return Origin(lsn, name)


def _relation(data: bytes, off: int = 1) -> Relation:
    (oid,) = _unpack_u32(data, off)
    namespace, off = _read_str(data, off + 4)
    name, off = _read_str(data, off)
    ident, ncols = _unpack_u8_u16(data, off)
    off += 3
    replica_identity = chr(ident)
    if replica_identity not in "dnfi":
        raise ProtocolError(_describe(data, f"replica identity {replica_identity!r} in"))
    columns = []
    for _ in range(ncols):
        flags = data[off]
        col_name, off = _read_str(data, off + 1)
        type_oid, typmod = _unpack_u32_i32(data, off)
        off += 8
        columns.append(RelationColumn(bool(flags & 1), col_name, type_oid, typmod))
    _check_end(data, off)
    return Relation(oid, namespace, name, replica_identity, tuple(columns))


def _type(data: bytes, off: int = 1) -> Type:
    (oid,) = _unpack_u32(data, off)
    namespace, off = _read_str(data, off + 4)
    name, off = _read_str(data, off)
    _check_end(data, off)
    return Type(oid, namespace, name)


def _truncate(data: bytes, off: int = 1) -> Truncate:
    n, options = _unpack_u32_u8(data, off)
    off += 5
    _check_end(data, off + 4 * n)
    oids = struct.unpack_from(f"!{n}I", data, off)
    return Truncate(oids, bool(options & 1), bool(options & 2))


def _message(data: bytes, off: int = 1) -> Message:
    flags, lsn = _unpack_u8_u64(data, off)
    prefix, off = _read_str(data, off + 9)
    (size,) = _unpack_u32(data, off)
    off += 4
    _check_end(data, off + size)
    return Message(bool(flags & 1), lsn, prefix, data[off:])


def _stream_start(data: bytes, off: int = 1) -> StreamStart:
    _check_end(data, off + 5)
    xid, first = _unpack_u32_u8(data, off)
    return StreamStart(xid, first == 1)


def _stream_stop(data: bytes, off: int = 1) -> StreamStop:
    _check_end(data, off)
    return StreamStop()


def _stream_commit_msg(data: bytes, off: int = 1) -> StreamCommit:
    _check_end(data, off + 29)
    return StreamCommit(*_unpack_stream_commit(data, off))


def _stream_abort(data: bytes, off: int = 1) -> StreamAbort:
    if len(data) == off + 24:  # version 4, streaming = parallel: abort LSN and time follow
        return StreamAbort(*_unpack_u32_u32_u64_i64(data, off))
    _check_end(data, off + 8)
    return StreamAbort(*_unpack_u32_u32(data, off))


def _begin_prepare_msg(data: bytes, off: int = 1) -> BeginPrepare:
    fixed = _unpack_begin_prepare(data, off)
    gid, off = _read_str(data, off + 28)
    _check_end(data, off)
    return BeginPrepare(*fixed, gid)


def _prepare_like(cls: type, data: bytes, off: int) -> Prepare | CommitPrepared | StreamPrepare:
    fixed = _unpack_prepare(data, off)
    gid, off = _read_str(data, off + 29)
    _check_end(data, off)
    return cls(*fixed, gid)


def _prepare_msg(data: bytes, off: int = 1) -> Prepare:
    return _prepare_like(Prepare, data, off)


def _commit_prepared(data: bytes, off: int = 1) -> CommitPrepared:
    return _prepare_like(CommitPrepared, data, off)


def _stream_prepare(data: bytes, off: int = 1) -> StreamPrepare:
    return _prepare_like(StreamPrepare, data, off)


def _rollback_prepared_msg(data: bytes, off: int = 1) -> RollbackPrepared:
    fixed = _unpack_rollback_prepared(data, off)
    gid, off = _read_str(data, off + 37)
    _check_end(data, off)
    return RollbackPrepared(*fixed, gid)


def _unknown(data: bytes, off: int = 1):
    raise ProtocolError(
        f"unknown pgoutput message type {data[:1]!r} (0x{data[0]:02x}), {len(data)} bytes"
    )


_PARSERS = {
    b"B": _begin_msg,
    b"C": _commit_msg,
    b"O": _origin,
    b"R": _relation,
    b"Y": _type,
    b"I": _insert,
    b"U": _update,
    b"D": _delete,
    b"T": _truncate,
    b"M": _message,
    b"S": _stream_start,
    b"E": _stream_stop,
    b"c": _stream_commit_msg,
    b"A": _stream_abort,
    b"b": _begin_prepare_msg,
    b"P": _prepare_msg,
    b"K": _commit_prepared,
    b"r": _rollback_prepared_msg,
    b"p": _stream_prepare,
}
# Messages that carry the (sub)transaction xid right after the type byte inside a streamed block.
_STREAMED = frozenset(b"RYIUDTM")

# Indexed by the first byte: a tuple index is cheaper than a dict lookup and needs no miss check.
_DISPATCH = tuple(_PARSERS.get(bytes([i]), _unknown) for i in range(256))


def parse(data: bytes | bytearray | memoryview) -> AnyMessage:
    """Decode one pgoutput message (the payload of one XLogData, or one row of
    ``pg_logical_slot_get_binary_changes``). Raises :class:`ProtocolError` for an unknown type,
    a truncated or overlong message, or a malformed one."""
    if type(data) is not bytes:
        data = bytes(data)
    try:
        return _DISPATCH[data[0]](data)
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError) as exc:
        raise ProtocolError(_describe_failure(data, exc)) from exc


def parse_streamed(data: bytes | bytearray | memoryview) -> tuple[int | None, AnyMessage]:
    """Decode one message received between Stream Start and Stream Stop (protocol version 2+).

    There, Relation, Type, Insert, Update, Delete, Truncate and logical decoding messages carry
    the xid of the (sub)transaction they belong to right after the type byte; it is returned
    beside the message, which is otherwise the same as :func:`parse` gives. Other messages (the
    Origin that follows a first Stream Start, the Stream Stop that ends the block) carry none and
    come back as ``(None, message)``, so a consumer can use this for everything from Stream
    Start to Stream Stop."""
    if type(data) is not bytes:
        data = bytes(data)
    try:
        kind = data[0]
        if kind in _STREAMED:
            (xid,) = _unpack_u32(data, 1)
            return xid, _DISPATCH[kind](data, 5)
        return None, _DISPATCH[kind](data)
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError) as exc:
        raise ProtocolError(_describe_failure(data, exc)) from exc


STREAM_STOP: Final = b"E"[0]


def streamed_xid(data: bytes) -> int | None:
    """The (sub)transaction xid a message between Stream Start and Stream Stop carries, without
    decoding the rest (a streamed change is staged as it came and decoded at its commit); None
    for the messages that carry none (Origin, Stream Stop)."""
    if data[0] in _STREAMED:
        if len(data) < 5:
            raise ProtocolError(_describe(data, "truncated"))
        return _unpack_u32(data, 1)[0]
    return None


def _describe_failure(data: bytes, exc: Exception) -> str:
    if not data:
        return "empty pgoutput message"
    if isinstance(exc, UnicodeDecodeError):
        return _describe(data, f"text that is not UTF-8 ({exc.reason}) in")
    return _describe(data, "truncated or malformed")
