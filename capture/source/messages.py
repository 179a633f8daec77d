"""The messages of PostgreSQL's ``pgoutput`` plugin, as capture/stream/pgoutput.py decodes them:
one frozen dataclass per message type, the field names the protocol documentation gives
("Logical Replication Message Formats"); :data:`UNCHANGED` for a TOASTed value the server did not
send; and PostgreSQL's timestamps (microseconds since 2000-01-01 UTC) in Unix time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeAlias

__all__ = [
    "PG_EPOCH_UNIX_MICROS",
    "UNCHANGED",
    "AnyMessage",
    "Begin",
    "BeginPrepare",
    "Commit",
    "CommitPrepared",
    "Delete",
    "Insert",
    "Message",
    "Origin",
    "Prepare",
    "ProtocolError",
    "Relation",
    "RelationColumn",
    "RollbackPrepared",
    "StreamAbort",
    "StreamCommit",
    "StreamPrepare",
    "StreamStart",
    "StreamStop",
    "Truncate",
    "Type",
    "Update",
    "pg_time_to_unix_micros",
    "unix_micros_to_pg_time",
]


class ProtocolError(ValueError):
    """A message that is not valid pgoutput: unknown type, truncated, overlong or malformed."""


class _Unchanged:
    """Type of :data:`UNCHANGED`; there is exactly one instance."""

    __slots__ = ()
    _instance: _Unchanged | None = None

    def __new__(cls) -> _Unchanged:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED"

    def __reduce__(self) -> str:
        # copy, deepcopy and pickle hand back the module-level singleton.
        return "UNCHANGED"


UNCHANGED: Final = _Unchanged()
"""Stands for a TOASTed column value that did not change and that the server did not send
(tuple data kind 'u'). It is never real data: the consumer must take the value from elsewhere."""


# --- messages of protocol version 1 ---------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int
    commit_time: int  # microseconds since 2000-01-01 00:00 UTC, as sent
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    flags: int
    lsn: int  # LSN of the commit record
    end_lsn: int  # end of the transaction: the position to confirm once it is delivered
    commit_time: int  # microseconds since 2000-01-01 00:00 UTC


@dataclass(frozen=True, slots=True)
class Origin:
    lsn: int  # LSN of the commit on the origin server
    name: str


@dataclass(frozen=True, slots=True)
class RelationColumn:
    key: bool  # part of the replica identity (primary key or REPLICA IDENTITY index, or all)
    name: str
    type_oid: int
    typmod: int  # -1 when the type has no modifier


@dataclass(frozen=True, slots=True)
class Relation:
    oid: int
    namespace: str  # empty for pg_catalog
    name: str
    replica_identity: str  # pg_class.relreplident: 'd' default, 'n' nothing, 'f' full, 'i' index
    columns: tuple[RelationColumn, ...]


@dataclass(frozen=True, slots=True)
class Type:
    oid: int
    namespace: str  # empty for pg_catalog
    name: str


@dataclass(frozen=True, slots=True)
class Insert:
    relation_oid: int
    new: tuple


@dataclass(frozen=True, slots=True)
class Update:
    relation_oid: int
    old: tuple | None  # None unless the key changed ('K') or REPLICA IDENTITY FULL ('O')
    old_is_key: bool  # True: `old` holds only the key columns (others None); False: whole row
    new: tuple


@dataclass(frozen=True, slots=True)
class Delete:
    relation_oid: int
    old: tuple
    old_is_key: bool  # True: only the key columns are set (others None); False: the whole row


@dataclass(frozen=True, slots=True)
class Truncate:
    relation_oids: tuple[int, ...]
    cascade: bool
    restart_identity: bool


@dataclass(frozen=True, slots=True)
class Message:
    """A logical decoding message ('M'), written by ``pg_logical_emit_message``. Its ``lsn`` is
    where its WAL record ends. Non-transactional ones arrive outside any Begin/Commit."""

    transactional: bool
    lsn: int
    prefix: str
    content: bytes


# --- streamed transactions (protocol version 2+) ---------------------------------------------
@dataclass(frozen=True, slots=True)
class StreamStart:
    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    pass


@dataclass(frozen=True, slots=True)
class StreamCommit:
    xid: int
    flags: int
    lsn: int
    end_lsn: int
    commit_time: int


@dataclass(frozen=True, slots=True)
class StreamAbort:
    xid: int
    subxid: int  # equals xid when the whole (top-level) transaction aborted
    abort_lsn: int | None = None  # version 4 with streaming = parallel only
    abort_time: int | None = None  # version 4 with streaming = parallel only


# --- two-phase commit (protocol version 3+, two_phase option) ---------------------------------
@dataclass(frozen=True, slots=True)
class BeginPrepare:
    prepare_lsn: int
    end_lsn: int
    prepare_time: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class Prepare:
    flags: int
    prepare_lsn: int
    end_lsn: int
    prepare_time: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class CommitPrepared:
    flags: int
    lsn: int
    end_lsn: int
    commit_time: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class RollbackPrepared:
    flags: int
    prepare_end_lsn: int
    rollback_end_lsn: int
    prepare_time: int
    rollback_time: int
    xid: int
    gid: str


@dataclass(frozen=True, slots=True)
class StreamPrepare:
    flags: int
    prepare_lsn: int
    end_lsn: int
    prepare_time: int
    xid: int
    gid: str


# Every message class. (``Message`` is the 'M' message itself, the name the protocol gives it.)
AnyMessage: TypeAlias = (
    Begin
    | Commit
    | Origin
    | Relation
    | Type
    | Insert
    | Update
    | Delete
    | Truncate
    | Message
    | StreamStart
    | StreamStop
    | StreamCommit
    | StreamAbort
    | BeginPrepare
    | Prepare
    | CommitPrepared
    | RollbackPrepared
    | StreamPrepare
)


# --- timestamps ---------------------------------------------------------------------
PG_EPOCH_UNIX_MICROS: Final = 946_684_800_000_000  # 2000-01-01 00:00 UTC in Unix microseconds


def pg_time_to_unix_micros(t: int) -> int:
    """PostgreSQL timestamp (microseconds since 2000-01-01 UTC) → microseconds since 1970."""
    return t + PG_EPOCH_UNIX_MICROS


def unix_micros_to_pg_time(t: int) -> int:
    """Microseconds since 1970 → PostgreSQL timestamp (microseconds since 2000-01-01 UTC)."""
    return t - PG_EPOCH_UNIX_MICROS
