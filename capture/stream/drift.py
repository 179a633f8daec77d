"""DDL that no row change followed. pgoutput describes a table (a Relation message) only before its
next change, so a rename or a rewrite (capture/stream/schema_changes.py) of a table nobody
writes to afterwards would never reach the views. Every few seconds the stream compares each
captured table's columns in the catalog with the schema the views last met; a difference that is
still there once the stream has passed the WAL position where it was first seen (every change of
the table before it has been streamed, none after it, or its Relation message would have ended
the difference) is taken from the catalog (Tables.described)."""

from __future__ import annotations

import psycopg

from capture.stream.schema_changes import shape_of
from capture.stream.tables import Tables
from common.lsn import Lsn
from common.pg import WAL_INSERT_POSITION

__all__ = ["Drift"]

# The published tables' live columns as pgoutput sends them (generated ones only when the
# publications publish them, PostgreSQL 18's publish_generated_columns), and
# where the WAL is now (on a standby: replayed): every DDL this sees committed before it.
SHAPES = f"""
select c.oid, n.nspname::text, c.relname::text,
       array_agg(a.attname::text order by a.attnum),
       array_agg(format_type(a.atttypid, a.atttypmod) order by a.attnum),
       {WAL_INSERT_POSITION}::text
from pg_publication_tables p
join pg_namespace n on n.nspname = p.schemaname
join pg_class c on c.relnamespace = n.oid and c.relname = p.tablename
join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
     and (a.attgenerated = '' or %s)
where p.pubname = any(%s)
group by c.oid, n.nspname, c.relname
"""


class Drift:
    def __init__(self, catalog: psycopg.Connection, publications: list[str], tables: Tables,
                 generated: bool = False):
        self.catalog = catalog
        self.publications = publications
        self.tables = tables
        self.generated = generated
        self._seen: tuple[int, dict[int, list]] | None = None  # (WAL position, oid -> shape)

    def check(self, streamed: int) -> list[int]:
        """The tables whose catalog differs from what the views met and has not changed since
        a look the stream has passed (``streamed``: the stream's position)."""
        if self._seen is not None and streamed < self._seen[0]:
            return []  # the stream is behind the last look: its Relation messages may come
        position, drifted = self._look()
        due = [oid for oid, shape in drifted.items()
               if self._seen is not None and self._seen[1].get(oid) == shape]
        self._seen = (position, {o: s for o, s in drifted.items() if o not in due})
        return due

    def _look(self) -> tuple[int, dict[int, list]]:
        rows = self.catalog.execute(SHAPES, (self.generated, self.publications)).fetchall()
        drifted = {}
        for oid, schema, name, names, types, _ in rows:
            met = self.tables.last_met(oid, schema, name)
            shape = list(zip(names, types, strict=True))
            if met is not None and shape_of(met) != shape:
                drifted[oid] = shape
        position = Lsn.parse(rows[0][5]) if rows else 0
        return position, drifted
