"""Reading column types from the PostgreSQL catalogs into :mod:`schemas.pgtypes` models.

Only ``SELECT`` on ``pg_type``, ``pg_namespace``, ``pg_enum``, ``pg_range`` and
``pg_attribute`` (readable by every role by default): a role with just REPLICATION and SELECT
can use it.
"""

from __future__ import annotations

import psycopg

from schemas.pgtypes import Column, PgType

__all__ = ["load_columns", "load_type"]

_TYPE_SQL = """
select t.typname::text, n.nspname::text, t.typtype::text, t.typcategory::text,
       t.typelem, t.typbasetype, t.typtypmod, t.typndims, t.typdelim::text,
       (select e.typarray from pg_catalog.pg_type e where e.oid = t.typelem) as elem_array,
       r.rngsubtype,
       {multirange_of} as multirange_of,
       case when t.typtype = 'e' then array(
           select l.enumlabel::text from pg_catalog.pg_enum l
           where l.enumtypid = t.oid order by l.enumsortorder) end as labels
from pg_catalog.pg_type t
join pg_catalog.pg_namespace n on n.oid = t.typnamespace
left join pg_catalog.pg_range r on r.rngtypid = t.oid
where t.oid = %s
"""

_MULTIRANGE_OF = "(select m.rngtypid from pg_catalog.pg_range m where m.rngmultitypid = t.oid)"

_COLUMNS_SQL = """
select a.attname::text, a.atttypid, a.atttypmod, a.attnotnull, a.attndims,
       pg_catalog.format_type(a.atttypid, a.atttypmod), a.attgenerated <> '',
       case when a.atthasmissing then (a.attmissingval::text::text[])[1] end
from pg_catalog.pg_attribute a
where a.attrelid = %s and a.attnum > 0 and not a.attisdropped
order by a.attnum
"""


def _type_sql(conn: psycopg.Connection) -> str:
    # pg_range.rngmultitypid exists from PostgreSQL 14 (multiranges).
    has_multiranges = conn.info.server_version >= 140000
    return _TYPE_SQL.format(multirange_of=_MULTIRANGE_OF if has_multiranges else "null::oid")


def load_type(conn: psycopg.Connection, oid: int, cache: dict[int, PgType] | None = None) -> PgType:
    """The :class:`PgType` of ``oid``, with its element (arrays), base (domains) and subtype
    (ranges: the bound type; multiranges: the range type) loaded recursively. ``cache`` (oid →
    PgType) is consulted and filled; pass the same dict to share work across calls."""
    if cache is None:
        cache = {}
    found = cache.get(oid)
    if found is not None:
        return found
    with conn.cursor() as cur:
        cur.execute(_type_sql(conn), (oid,))
        row = cur.fetchone()
    if row is None:
        raise LookupError(f"no type with oid {oid} in pg_type")
    (
        name,
        schema,
        kind,
        category,
        elem,
        basetype,
        typmod,
        ndims,
        delim,
        elem_array,
        rngsubtype,
        multirange_of,
        labels,
    ) = row

    element = base = subtype = None
    # A true array type is its element's typarray; int2vector and oidvector have a typelem
    # too, but their own text format, so they stay scalar.
    if category == "A" and elem and elem_array == oid:
        element = load_type(conn, elem, cache)
    if kind == "d" and basetype:
        base = load_type(conn, basetype, cache)
    if kind == "r" and rngsubtype:
        subtype = load_type(conn, rngsubtype, cache)
    if kind == "m" and multirange_of:
        subtype = load_type(conn, multirange_of, cache)

    pg = PgType(
        oid=oid,
        name=name,
        schema=schema,
        kind=kind,
        category=category,
        element=element,
        base=base,
        subtype=subtype,
        labels=tuple(labels or ()),
        typmod=typmod,
        ndims=ndims,
        delimiter=delim or "",
    )
    cache[oid] = pg
    return pg


def load_columns(
    conn: psycopg.Connection,
    relid: int,
    cache: dict[int, PgType] | None = None,
    include_generated: bool = False,
) -> list[Column]:
    """The live columns of the relation ``relid`` (attnum > 0, not dropped), in attnum order.
    An unknown ``relid`` gives an empty list.

    Generated columns are left out unless ``include_generated``: pgoutput sends them only from
    a publication with PostgreSQL 18's ``publish_generated_columns = stored`` (and the snapshot
    then selects them by name), so the list matches the tuples the capture receives.
    """
    if cache is None:
        cache = {}
    with conn.cursor() as cur:
        cur.execute(_COLUMNS_SQL, (relid,))
        rows = cur.fetchall()
    return [
        Column(
            name=name,
            type=load_type(conn, typid, cache),
            typmod=typmod,
            not_null=bool(not_null),
            ndims=ndims,
            formatted=formatted,
            generated=bool(generated),
            missing=missing,
        )
        for name, typid, typmod, not_null, ndims, formatted, generated, missing in rows
        if include_generated or not generated
    ]
