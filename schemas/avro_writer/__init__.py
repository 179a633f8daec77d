"""Avro binary encoders compiled for one schema: the bytes ``fastavro.schemaless_writer`` writes,
several times faster.

:func:`compile_writer` parses the schema once, with fastavro's own parser (so names, namespaces
and references resolve exactly as fastavro resolves them), and generates a Python function for
it: one straight-line function per record that appends byte strings to a list which is joined
once, with zigzag varints of small ints and lengths taken from precomputed tables. Nothing about
the schema is interpreted per call.

What fastavro does, this does, for every datum fastavro accepts as valid: union branches are
chosen by fastavro's rules (first branch whose validation passes; a record branch only wins over
a later record branch by matching more fields and loses to any later non-record match; ``float``
yields to a later ``double``; tuple notation ``(name, datum)``), logical types convert
``datetime``/``date``/``time``/``uuid.UUID``/``Decimal`` values the same way, a missing field
takes its default (or null when the field's type admits null). Common cases skip the general
rules: ``None`` goes straight to the null branch and a datum whose exact class selects one
branch goes straight to it.

Deliberately different: what fastavro writes without complaint but wrongly (an ``int`` beyond
int32 for ``int``; a float, ``Decimal`` or ``UUID`` truncated into a ``long``; anything truthy
as a ``boolean``; a decimal that does not fit its ``fixed`` size) raises instead, and
``Decimal("-0")`` in a fixed decimal is written as zero (fastavro writes -2 units in the last
place). The other way round, data that fastavro's union validation would refuse deep inside a
branch chosen by class (a bool item in an array of ints, a ``"-type"`` naming another record)
is written as the branch's plain writer writes it, as fastavro does outside unions.

:func:`compile_row_writer` is the same for a record whose fields come from a tuple of texts
through a parser each (a table's row as PostgreSQL sends it): the capture's path, with no dict
between the row and its bytes.

Errors are :class:`AvroValueError` / :class:`AvroTypeError` (subclasses of ``ValueError`` /
``TypeError``) whose message names the field path, e.g. ``field 'pauses[2].days': ...``.

The package's rooms: :mod:`.compiler` generates the code (:mod:`.unions` its unions), which calls
:mod:`.varints`, :mod:`.checks` and :mod:`.decimals` at run time and raises through
:mod:`.errors`; :mod:`.validators` is fastavro's validation, for union resolution;
:mod:`.schema_info` reads the parsed schema. The underscored names are the package's internals,
shared between its modules and bound into the generated code's namespace under those names.
"""

from schemas.avro_writer.compiler import Writer, compile_row_writer, compile_writer
from schemas.avro_writer.errors import AvroTypeError, AvroValueError

__all__ = [
    "AvroTypeError",
    "AvroValueError",
    "Writer",
    "compile_row_writer",
    "compile_writer",
]
