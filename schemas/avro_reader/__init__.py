"""Avro binary decoders compiled for one schema: what ``fastavro.schemaless_reader`` returns
(with no reader schema), about twice as fast.

:func:`compile_reader` parses the schema once, with fastavro's own parser (so names, namespaces
and references resolve exactly as fastavro resolves them, as in :mod:`schemas.avro_writer`), and
generates one straight-line Python function for it. The function reads a ``bytes`` object by
integer position: a one-byte zigzag varint is a table lookup and longer ones a call, a string
is one slice and ``decode()``, a union index byte is compared with the canonical bytes of its
branches (``["null", T]``: ``0`` or ``2``) and the branch then reads just after it. Records are
inlined where they are used, and become functions of their own only when they recur.

The datum is fastavro's, value for value: logical types are applied with fastavro's own
functions (``fastavro.read.LOGICAL_READERS``), except ``decimal``, whose construction is
reproduced (an unscaled integer rounded to ``precision`` digits by a context of that precision,
then ``scaleb(-scale)`` in it) without fastavro's shared, mutated context. Read with the schema
of :func:`schemas.avro_schema.without_logical_types` to get the date/time values as plain ints.

Stricter than fastavro: malformed data raises :class:`AvroReadError` (a ``ValueError``) where
fastavro would return something anyway or never stop: a union or enum index out of range
(fastavro takes a negative one from the end), a negative length or block count beyond the bytes
left, a varint longer than 10 bytes or beyond 64 bits (fastavro wraps it), invalid UTF-8,
truncated data and bytes left after the datum.

Not compiled (:func:`compile_reader` returns None, and fastavro should read): a decimal whose
``precision`` no ``decimal.Context`` accepts (fastavro fails on every datum), and an array whose
items take no bytes at all (``null``, empty records): a few bytes could claim billions of them.

The package's rooms: :mod:`.compiler` generates the code, which calls :mod:`.runtime` (varints,
errors, logical types) as it reads.
"""

from schemas.avro_reader.compiler import Reader, compile_reader
from schemas.avro_reader.runtime import AvroReadError

__all__ = ["AvroReadError", "Reader", "compile_reader"]
