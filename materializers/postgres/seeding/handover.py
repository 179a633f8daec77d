"""Where the topics take over from the replica's seed: what the seed left in the target
(``bottler.seeds``), and what it means for the messages that follow: where each seeded table's
topic is read from, and which of its messages the seed already holds (:class:`SeedFilter`).

A table seeded from a source snapshot (:mod:`materializers.postgres.seeding`) is recorded with
``skip_below`` (B), the source's WAL insert position read just before the snapshot's slot was
created, and the topic's end offsets read before that (``start_offsets``). Why the rule below
is exact:

- the snapshot holds every transaction that committed before its consistent point S (B ≤ S),
  and none after; a transaction still running at S began after the slot's creation started
  (PostgreSQL's snapshot builder waits for every transaction running then), so each of its
  changes is at an LSN ≥ B;
- a message of the topic whose ``bottler.lsn`` header (the change's WAL position) is < B is
  therefore in the snapshot: skipped. One at ≥ B is applied, even if the snapshot holds it too:
  per key, changes come in increasing LSN, so what is applied is the tail of the key's changes,
  and it ends with the key's latest state;
- a message without the header is a row of the capture's own snapshot (as of its consistent
  point C ≤ B, or of a resumed snapshot's later one): what it says is either in the seed or in
  a later change of the stream, which the capture publishes from C on: skipped;
- a truncate event (its LSN is its transaction's commit) below B is in the snapshot: skipped.
  One at or after B is applied: it empties the table, and every change of the table committed
  after it holds a lock the truncate held, so is at an LSN > B and applied;
- every message before ``start_offsets`` was published before B was read, so committed before:
  the topic is read from there.

Tables that join the capture later are not seeded: they are read from offset 0, as without a
seed. A seeded table that leaves the capture and joins it again (its primary key dropped and
added back) gets a copy from the capture without the header, which this rule skips: give it a
fresh copy (drop its target table and its ``bottler.seeds`` row, and restart the replica).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import psycopg
from confluent_kafka import Message

from materializers.core.decode import DecodeError, Decoder

LSN_HEADER = "bottler.lsn"
COPYING, DONE, NOT_SEEDED = "copying", "done", "not seeded"

SEEDS_DDL = [
    "create table if not exists bottler.seeds (group_id text not null, topic text not null,"
    " schema_name text not null, table_name text not null, state text not null,"
    " skip_below bigint, snapshot_lsn bigint, start_offsets jsonb, rows bigint,"
    " reason text, seeded_at timestamptz, primary key (group_id, topic))",
]


@dataclass(frozen=True)
class Seeded:
    """A table the seed copied: its topic's messages below ``skip_below`` are in the target."""

    topic: str
    skip_below: int
    start_offsets: Mapping[int, int]


def load(conn: psycopg.Connection, group_id: str) -> dict[str, Seeded]:
    """The seeded tables of ``group_id``, by topic (empty if the target was never seeded)."""
    rows = conn.execute(
        "select topic, skip_below, start_offsets from bottler.seeds"
        " where group_id = %s and state = %s", (group_id, DONE),
    ).fetchall()
    return {topic: Seeded(topic, skip_below, {int(p): int(o) for p, o in
                                              _json(offsets).items()})
            for topic, skip_below, offsets in rows}


def _json(value) -> dict:
    return json.loads(value) if isinstance(value, str) else (value or {})


class SeedFilter:
    """``skip(message) -> bool`` for the consumer loop: True for a message of a seeded table
    that the seed holds already (see the module's docstring). Everything else is applied."""

    def __init__(self, seeded: Mapping[str, Seeded], truncate_topic: str, decoder: Decoder):
        self.below = {topic: s.skip_below for topic, s in seeded.items()}
        self.truncate_topic = truncate_topic
        self.decoder = decoder
        self.skipped = 0

    def __call__(self, msg: Message) -> bool:
        topic = msg.topic()
        below = self.below.get(topic)
        if below is None:
            if topic != self.truncate_topic:
                return False
            return self._truncate_in_seed(msg)
        for name, value in msg.headers() or ():
            if name == LSN_HEADER:
                if int(value) >= below:
                    return False
                break
        self.skipped += 1
        return True

    def _truncate_in_seed(self, msg: Message) -> bool:
        if msg.value() is None:
            return False
        try:
            _, event = self.decoder.decode(msg.value())
            below = self.below.get(event["topic"])
            return below is not None and int(event["lsn"]) < below
        except (DecodeError, KeyError, TypeError, ValueError):
            return False  # the loop reports it as it does any undecodable event
