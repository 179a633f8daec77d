"""The replica's consumed offsets, stored in the target with the rows (``bottler.offsets``):
read, completed by a seed's starting offsets, and moved by compare and set."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from materializers.core.changes import TopicPartition
from materializers.core.sink import OffsetsMoved
from materializers.postgres.seeding import handover

OFFSETS_DDL = [
    "create table if not exists bottler.offsets (group_id text not null, topic text not null,"
    " partition int not null, next_offset bigint not null,"
    " primary key (group_id, topic, partition))",
]


def read_offsets(conn: psycopg.Connection, group_id: str,
            partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int]:
    """The offsets stored in ``bottler.offsets`` for ``partitions``."""
    wanted = set(partitions)
    rows = conn.execute(
        'select topic, "partition", next_offset from bottler.offsets where group_id = %s',
        (group_id,),
    ).fetchall()
    return {(t, p): o for t, p, o in rows if (t, p) in wanted}


def with_seed_starts(conn: psycopg.Connection, group_id: str,
                      partitions: Sequence[TopicPartition],
                      stored: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """``stored``, and where a seeded table's partition has no stored offset yet, the offset
    its seed starts reading from (where the topic stood at the seed's snapshot)."""
    if not conn.execute("select to_regclass('bottler.seeds') is not null").fetchone()[0]:
        return stored
    seeded = handover.load(conn, group_id)
    found = dict(stored)
    for topic, partition in set(partitions) - stored.keys():
        start = seeded[topic].start_offsets.get(partition) if topic in seeded else None
        if start:
            found[(topic, partition)] = start
    return found


def store_offsets(conn: psycopg.Connection, group_id: str, known: dict[TopicPartition, int | None],
          offsets: dict[TopicPartition, int]) -> dict[TopicPartition, int]:
    """Store ``offsets``: partitions in ``known`` (those this instance holds, with their stored
    offset as it last saw it) move only from that value (compare and set: the row lock orders
    this with another instance's write of it); others (a truncate's barrier for partitions
    another instance holds) are set. Returns the held ones, stored once committed."""
    held = {tp: o for tp, o in offsets.items() if tp in known}
    others = [(group_id, t, p, o) for (t, p), o in offsets.items() if (t, p) not in held]
    with conn.cursor() as cur:
        for (t, p), o in held.items():
            expected = known[(t, p)]
            if expected is None:
                cur.execute('insert into bottler.offsets (group_id, topic, "partition",'
                            " next_offset) values (%s, %s, %s, %s) on conflict do nothing",
                            (group_id, t, p, o))
            else:
                cur.execute('update bottler.offsets set next_offset = %s where group_id = %s'
                            ' and topic = %s and "partition" = %s and next_offset = %s',
                            (o, group_id, t, p, expected))
            if cur.rowcount != 1:
                raise OffsetsMoved(f"{t}[{p}]: stored offset no longer {expected}")
        if others:
            cur.executemany(
                'insert into bottler.offsets (group_id, topic, "partition", next_offset)'
                " values (%s, %s, %s, %s) on conflict (group_id, topic, \"partition\")"
                " do update set next_offset = excluded.next_offset",
                others,
            )
    return held
