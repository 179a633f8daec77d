"""What a table's new description says about the rows already published: which columns were
renamed, and whether PostgreSQL rewrote values that no message brings.

Three kinds of DDL change existing rows without a row change in the WAL (a table rewrite is not
decoded), so their effect never reaches the topics by itself:

- ``RENAME COLUMN``: every published row holds the value under the old name;
- ``ALTER COLUMN … TYPE`` (with or without ``USING``): every row's value may have changed;
- ``ADD COLUMN`` with a volatile default (``random()``, ``clock_timestamp()``), an identity or a
  serial: PostgreSQL rewrites the table with a value per row (a non-volatile default is kept as
  ``attmissingval`` instead, and travels as ``pg.missing``: schemas/evolution.py).

(A renamed enum value changes rows too, and changes no table's description at all:
Tables.relabeled finds it.)

The capture answers each by re-publishing the table (an incremental snapshot, capture/
incremental.py): every row's latest message then carries the table's present shape and values,
so every view, and a rebuild from offset zero, ends equal to the source. A rename is also marked
in the new schema (the field's Avro ``aliases`` and ``pg.renamed``), so the replica renames its
column in place instead of passing through NULLs.

pgoutput's Relation message names columns without their attribute numbers. A new name that the
catalog shows at the attnum an old name had when the capture met it is that column renamed.
Otherwise (after a restart, or when the catalog changed again since) by position: live columns
keep their attnum order, and an added column always comes last. A new name between two columns
both versions have replaces the old name(s) there, one for one; a new name after the last such
column is a rename only if the catalog shows no column dropped before it since the capture met
the old version (a drop leaves one behind). Anything unsure counts as a drop plus an add, and a
capture far behind the catalog may take a drop plus an add for a rename: either way, the
re-publishing ends equal to the source.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg

__all__ = ["Attributes", "SchemaChange", "compare", "shape_of"]

Shape = Sequence[tuple[str, str]]  # (column name, type as format_type prints it), attnum order


@dataclass(frozen=True)
class Attributes:
    """The table's columns in the catalog now (which may be ahead of the stream)."""

    attnums: dict[str, int] = field(default_factory=dict)  # live columns
    dropped: tuple[int, ...] = ()  # attnums of dropped columns
    rewritten: frozenset[str] = frozenset()  # a default or identity, but no attmissingval

    @classmethod
    def of(cls, catalog: psycopg.Connection, oid: int) -> Attributes:
        rows = catalog.execute(
            "select attname::text, attnum, attisdropped,"
            " (atthasdef or attidentity <> '') and not atthasmissing"
            " from pg_catalog.pg_attribute where attrelid = %s and attnum > 0", (oid,)).fetchall()
        return cls({n: a for n, a, dropped, _ in rows if not dropped},
                   tuple(a for _, a, dropped, _ in rows if dropped),
                   frozenset(n for n, _, dropped, r in rows if r and not dropped))


@dataclass(frozen=True)
class SchemaChange:
    renamed: dict[str, str]  # new column name -> old column name
    retyped: tuple[str, ...]  # columns (new names) whose type changed
    rewritten: tuple[str, ...]  # added columns whose older rows PostgreSQL filled by a rewrite

    def republish(self) -> str | None:
        """Why the table's rows must be published again, or None."""
        parts = [f"column {old} renamed to {new}" for new, old in self.renamed.items()]
        parts += [f"column {c} changed type" for c in self.retyped]
        parts += [f"column {c} added with a value per row" for c in self.rewritten]
        return "; ".join(parts) or None


def shape_of(value_schema: dict) -> list[tuple[str, str]]:
    """A value schema's columns (``pg.name``, ``pg.type``), as the capture wrote them."""
    return [(f.get("pg.name", f["name"]), f.get("pg.type", "")) for f in value_schema["fields"]]


def compare(old: Shape, new: Shape, catalog: Attributes,
            before: Attributes | None = None) -> SchemaChange:
    """What changed from ``old`` to ``new`` (both in attnum order); ``before``: the catalog
    when the capture met ``old``, if it did in this run."""
    old_names, new_names = [n for n, _ in old], [n for n, _ in new]
    renamed = _renames(old_names, new_names, catalog, before)
    old_types = dict(old)
    retyped = tuple(n for n, t in new if old_types.get(renamed.get(n, n), t) != t)
    added = [n for n in new_names if n not in old_types and n not in renamed]
    return SchemaChange(renamed, retyped, tuple(n for n in added if n in catalog.rewritten))


def _renames(old: list[str], new: list[str], catalog: Attributes,
             before: Attributes | None) -> dict[str, str]:
    kept = [n for n in new if n in set(old)]  # in the same order in both
    gone = [n for n in old if n not in set(new)]
    came = [n for n in new if n not in set(old)]
    if not gone or not came:
        return {}
    # A new name at the attnum an old one had is that column.
    at = {catalog.attnums[n]: n for n in came if n in catalog.attnums}
    out = {at[before.attnums[n]]: n for n in gone
           if before is not None and before.attnums.get(n) in at}
    # Each run of names between two kept columns (and after the last): old ones, new ones.
    for before_name, (was, now) in _segments(old, new, kept):
        was = [n for n in was if n not in out.values()]
        now = [n for n in now if n not in out]
        if not was or not now:
            continue
        if before_name is not _END and len(was) == len(now):
            out.update(zip(now, was, strict=True))  # nothing is ever added in the middle
        elif before_name is _END and len(was) <= len(now) and _no_drop(
                _last(kept), now[len(was) - 1], catalog, before):
            out.update(zip(now, was, strict=False))
    return out


_END = object()


def _segments(old: list[str], new: list[str], kept: list[str]):
    """(the kept name ending the run, or _END for the run after the last one), (old names in
    the run, new names in the run)."""
    def runs(names: list[str]) -> list[list[str]]:
        out, current = [], []
        for n in names:
            if n in kept_set:
                out.append(current)
                current = []
            else:
                current.append(n)
        out.append(current)
        return out

    kept_set = set(kept)
    ends = [*kept, _END]
    return zip(ends, zip(runs(old), runs(new), strict=True), strict=True)


def _last(kept: list[str]) -> str | None:
    return kept[-1] if kept else None


def _no_drop(before_name: str | None, upto: str, catalog: Attributes,
             before: Attributes | None) -> bool:
    """Whether the catalog shows no column dropped (since ``before``, if known) between
    ``before_name`` (None: the start) and ``upto``: then the new names there took the old
    ones' places."""
    start = 0 if before_name is None else catalog.attnums.get(before_name)
    end = catalog.attnums.get(upto)
    if start is None or end is None:  # the catalog is ahead of the stream: unsure
        return False
    earlier = set(before.dropped) if before is not None else set()
    return not any(start < d < end for d in catalog.dropped if d not in earlier)
