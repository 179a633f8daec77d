"""The replication connection: pgoutput from the capture's slot, with the options the server
supports (protocol 1, or with streaming of large transactions the newest of 2–4), and the errors
of a stream that could not start or broke off, in one line each."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg2

from capture.health import slot_safety
from capture.publish.transactional import KafkaTransactions
from capture.source.slot import replication_connect
from capture.stream.spool import Spool
from common.errors import BottlerError
from common.redact import redact

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StreamOptions:
    """What to stream and how."""

    dsn: str
    slot: str
    publications: list[str]
    heartbeat_interval: float  # seconds between heartbeats written into the WAL
    transaction_topic: bool  # BEGIN and COMMIT events go to the transactions topic
    chunk_rows: int = 10_000  # rows per chunk of an incremental snapshot
    # Stream large transactions while they run (pgoutput protocol 2+, where the server has it),
    # staged until they commit (capture/stream/spool.py) in the directory it gives for the
    # server's system identifier, then published in one Kafka transaction (made
    # by streaming_wanted); None: protocol 1, each
    # transaction sent by the server at its commit.
    spool_dir: Callable[[str], Path] | None = None
    generated: bool = False  # the publications publish stored generated columns (18+)
    primary: str | None = None  # a standby source's primary, where watermarks are written
    replay_workers: int = 2  # processes that encode a committed streamed transaction's rows


class Replication:
    """A started replication stream: its connection, cursor and (streaming) spool."""

    def __init__(self, options: StreamOptions):
        self.conn = replication_connect(options.dsn)
        self.cursor = cur = self.conn.cursor()
        self.spool: Spool | None = None  # the streamed transactions not committed yet
        settings = {"proto_version": "1", "messages": "true",
                    "publication_names": ",".join(_quoted(p) for p in options.publications)}
        version = streaming_protocol(self.conn.server_version) if options.spool_dir else None
        if version:
            settings |= {"proto_version": str(version), "streaming": "on"}
            cur.execute("IDENTIFY_SYSTEM")
            try:
                self.spool = Spool(options.spool_dir(cur.fetchone()[0]))
            except BaseException:
                self.conn.close()
                raise
        try:
            cur.start_replication(
                slot_name=options.slot, decode=False, status_interval=10, options=settings)
        except psycopg2.Error as exc:
            self.close()
            if slot_safety.lost_while_streaming(options.dsn, options.slot, exc):
                raise slot_safety.lost_slot_error(options.slot) from None
            raise BottlerError(
                f"cannot stream from replication slot {options.slot}: "
                f"{str(exc).strip().splitlines()[0]}",
                "another process may hold the slot (bottler slot status): stop it or choose "
                "another --slot",
            ) from None
        log.info("streaming from slot %s (publication %s, pgoutput protocol %s%s)", options.slot,
                 ", ".join(options.publications), settings["proto_version"],
                 ", large transactions streamed while they run" if version else "")

    def close(self) -> None:
        self.conn.close()
        if self.spool is not None:
            self.spool.close()  # what was not committed is streamed again to the next run


def broken_off(options: StreamOptions, exc: Exception) -> BottlerError:
    """The error of a stream whose connection failed while streaming."""
    if slot_safety.lost_while_streaming(options.dsn, options.slot, exc):
        return slot_safety.lost_slot_error(options.slot)
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return BottlerError(
        f"lost the connection to PostgreSQL while streaming: {redact(reason)}",
        "the server may be restarting or gone: run the capture again once it is up; it "
        "resumes from the slot's confirmed position, nothing is lost",
    )


def streaming_wanted(server_version: int, asked: str,
                     transactions: Callable[[], KafkaTransactions]) -> KafkaTransactions | None:
    """The Kafka transactions streamed transactions are published in, made by
    ``transactions()``, if large transactions are to be streamed (--stream-large-transactions):
    ``off``: None; ``on``: or one clear line where the server cannot stream or the broker
    refuses the capture's Kafka transactions; ``auto``: where both can, else None (protocol 1,
    as before, said once)."""
    if asked == "off":
        return None
    if streaming_protocol(server_version) is None:
        if asked == "auto":
            return None
        raise BottlerError(
            "streaming large transactions needs PostgreSQL 14 or newer; the source runs "
            f"{server_version // 10000}", "set --stream-large-transactions to auto or off")
    try:
        return transactions()
    except BottlerError as exc:
        if asked == "on":
            raise
        log.warning("large transactions are not streamed (pgoutput protocol 1: the source "
                    "spills them to its disk): %s", exc.message)
        return None


def streaming_protocol(server_version: int) -> int | None:
    """The newest pgoutput protocol of a server (``server_version_num``) that streams
    in-progress transactions: 2 on 14, 3 (two-phase) on 15, 4 (parallel apply) on 16 on; None
    before 14."""
    if server_version >= 160000:
        return 4
    if server_version >= 150000:
        return 3
    return 2 if server_version >= 140000 else None


def _quoted(name: str) -> str:
    """A publication name as pgoutput's publication_names list reads it."""
    return '"' + name.replace('"', '""') + '"'
