"""PostgreSQL column types → Avro types, with converters from PostgreSQL's text output.

Values arrive as the type's text output (what pgoutput sends in text mode and what
``COPY ... TO STDOUT`` sends once COPY's own escaping is undone), produced under
:data:`SESSION_SETTINGS`, or ``None`` for SQL NULL. :func:`codec_for` builds, once per column, a
:class:`Codec` whose ``schema`` is the Avro type of a non-null value and whose ``from_text`` turns
the text into the Python value fastavro writes for that schema.

The mapping is lossless: every value PostgreSQL can output maps to exactly one Avro value and
back, and a value that cannot be represented raises :class:`TypeConversionError` instead of being
altered. ``docs/type-mapping.md`` is the user-facing table; this package is pure (no database).

The package's rooms: :mod:`.model` (what the catalogs say), :mod:`.session` (the settings of
the text output), :mod:`.avro` (codecs, names, limits), :mod:`.mapping` (type → codec), the
parsers by kind (:mod:`.scalars`, :mod:`.datetimes`, :mod:`.arrays`, :mod:`.ranges`,
:mod:`.hstore`) and :mod:`.from_schema` (a parser found from a value schema).
"""

from schemas.pgtypes.arrays import (
    ARRAY_DIMENSION_SCHEMA,
    array_branches,
    general_array_schema,
    is_general_array,
    nested_elements,
)
from schemas.pgtypes.avro import (
    AVRO_NAMESPACE,
    DATE_NEG_INFINITY,
    DATE_POS_INFINITY,
    INTERVAL_NEG_INFINITY,
    INTERVAL_POS_INFINITY,
    TS_NEG_INFINITY,
    TS_POS_INFINITY,
    Codec,
    avro_name,
    dedupe_named_types,
    nullable,
    short_hash,
)
from schemas.pgtypes.datetimes import civil_from_days, days_from_civil
from schemas.pgtypes.from_schema import text_parser
from schemas.pgtypes.mapping import codec_for, numeric_precision_scale
from schemas.pgtypes.model import Column, PgType, TypeConversionError
from schemas.pgtypes.session import SESSION_SETTINGS, libpq_options, session_statements

__all__ = [
    "ARRAY_DIMENSION_SCHEMA",
    "AVRO_NAMESPACE",
    "DATE_NEG_INFINITY",
    "DATE_POS_INFINITY",
    "INTERVAL_NEG_INFINITY",
    "INTERVAL_POS_INFINITY",
    "SESSION_SETTINGS",
    "TS_NEG_INFINITY",
    "TS_POS_INFINITY",
    "Codec",
    "Column",
    "PgType",
    "TypeConversionError",
    "array_branches",
    "avro_name",
    "civil_from_days",
    "codec_for",
    "days_from_civil",
    "dedupe_named_types",
    "general_array_schema",
    "is_general_array",
    "libpq_options",
    "nested_elements",
    "nullable",
    "numeric_precision_scale",
    "session_statements",
    "short_hash",
    "text_parser",
]

