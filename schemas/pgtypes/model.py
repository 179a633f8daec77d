"""The model the mapping reads: PostgreSQL types and columns as the catalogs describe them, and
the error of a value that does not convert."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PgType:
    """A row of ``pg_type``, with what the mapping needs of the types it refers to.

    ``element`` is set for true array types only (not for ``int2vector``-like types);
    ``base`` for domains; ``subtype`` for ranges (the bound type) and for multiranges (the
    *range* type, whose own ``subtype`` is the bound type). ``typmod``, ``ndims`` and
    ``delimiter`` are ``pg_type.typtypmod``, ``typndims`` (both only meaningful for domains) and
    ``typdelim`` (the array delimiter; empty means the default: ``;`` for ``box``, else ``,``).
    """

    oid: int
    name: str
    schema: str
    kind: str
    category: str
    element: PgType | None = None
    base: PgType | None = None
    subtype: PgType | None = None
    labels: tuple[str, ...] = ()
    typmod: int = -1
    ndims: int = 0
    delimiter: str = ""

    @property
    def array_delimiter(self) -> str:
        if self.delimiter:
            return self.delimiter
        return ";" if self.name == "box" and self.schema == "pg_catalog" else ","


@dataclass(frozen=True)
class Column:
    """A live table column (``pg_attribute``): ``ndims`` is ``attndims``, ``formatted`` is
    ``format_type(atttypid, atttypmod)``, ``generated`` is true for generated columns."""

    name: str
    type: PgType
    typmod: int = -1
    not_null: bool = False
    ndims: int = 0
    formatted: str = ""
    generated: bool = False
    # The text of the value that rows older than the column read (ADD COLUMN with a non-volatile
    # default: pg_attribute.attmissingval). Those rows never pass through the WAL again.
    missing: str | None = None


class TypeConversionError(ValueError):
    """A text value that does not convert to its column's Avro type."""

    def __init__(self, type_name: str, value: object, reason: str = "", column: str | None = None):
        self.type_name = type_name
        self.value = value
        self.reason = reason
        self.column = column
        where = f" in column {column!r}" if column is not None else ""
        message = f"cannot convert {type_name} value {_shorten(value)}{where}"
        super().__init__(f"{message}: {reason}" if reason else message)


def _shorten(value: object, limit: int = 60) -> str:
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[: limit - 5]}...' ({len(str(value))} chars)"
