"""The writer's errors, which name the path of the offending value (``field 'pauses[2].days'``),
and the wrapping of any error the generated code meets on its way out of each field, item and
value."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any


class _PathError:
    """An encoding error with the path of the offending value, outermost segment first."""

    def __init__(self, reason: str, path: Sequence[str] = ()):
        super().__init__(reason)
        self.reason = reason
        self.path = list(path)

    def __str__(self) -> str:
        if not self.path:
            return self.reason
        where = "".join(s if s.startswith("[") else "." + s for s in self.path).lstrip(".")
        return f"field {where!r}: {self.reason}"


class AvroValueError(_PathError, ValueError):
    """A value that its schema cannot hold (out of range, unknown symbol, missing field...)."""


class AvroTypeError(_PathError, TypeError):
    """A value of the wrong Python type for its schema."""


def _show(value: Any) -> str:
    text = repr(value)
    if len(text) > 80:
        text = text[:75] + "...)"
    return f"{type(value).__name__} {text}"


def _wrap(exc: Exception, segment: str | None, value: Any, desc: str) -> BaseException:
    """``exc`` as an Avro*Error with ``segment`` prepended to its path; called from the
    generated code's ``except`` clauses (which cost nothing until something is raised)."""
    if isinstance(exc, _PathError):
        if segment is None:
            return exc
        new = type(exc)(exc.reason, [segment, *exc.path])
        cause = exc.__cause__
    else:
        path = [] if segment is None else [segment]
        if isinstance(exc, TypeError | AttributeError | struct.error):
            # raised by the generated code's operations on a value of the wrong type
            new = AvroTypeError(f"expected {desc}, got {_show(value)}", path)
        elif isinstance(exc, ValueError | ArithmeticError | LookupError):
            new = AvroValueError(f"cannot write {_show(value)} as {desc}: {exc}", path)
        else:
            return exc  # not a data problem (MemoryError, RecursionError...): leave it alone
        cause = exc
    new.__cause__ = cause
    new.__suppress_context__ = True
    return new


def _item_segment(items: list, item: Any) -> str:
    """``[i]`` for the failing ``item`` of ``items`` (the loop variable still holds it)."""
    for i, x in enumerate(items):
        if x is item:
            return f"[{i}]"
    return "[?]"


def _wrap_item(exc: Exception, items: list, item: Any, desc: str) -> BaseException:
    return _wrap(exc, _item_segment(items, item), item, desc)


def _wrap_value(exc: Exception, key: Any, value: Any, desc: str) -> BaseException:
    return _wrap(exc, f"[{key!r}]", value, desc)


def _missing(name: str) -> AvroValueError:
    return AvroValueError("missing from the record, and the field has no default", [name])
