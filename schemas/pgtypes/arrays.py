"""PostgreSQL arrays: the Avro schemas of an array column (the declared shape, and the general
record for any other), and the parser of array text output into either."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from schemas.pgtypes.avro import AVRO_NAMESPACE
from schemas.pgtypes.scalars import ident, unescape

#: One dimension of a general array: PostgreSQL's lower bound and the number of elements.
ARRAY_DIMENSION_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "ArrayDimension",
    "namespace": AVRO_NAMESPACE,
    "doc": "One dimension of a PostgreSQL array: its lower bound and its length.",
    "fields": [{"name": "lower", "type": "int"}, {"name": "length", "type": "int"}],
}
#: Field names of the general array record (how views recognise it).
GENERAL_ARRAY_FIELDS = ["dimensions", "elements"]


def general_array_schema(name: str, namespace: str, leaf: Any) -> dict[str, Any]:
    """The record that carries an array of any shape: its dimensions (lower bound, length),
    outermost first, and its elements flat in PostgreSQL's (row-major) order; ``leaf`` is the
    nullable element type."""
    return {
        "type": "record",
        "name": name,
        "namespace": namespace,
        "doc": "A PostgreSQL array whose dimensions or lower bounds differ from the column's "
               "declaration: dimensions outermost first, elements flat in row-major order.",
        "fields": [
            {"name": "dimensions", "type": {"type": "array", "items": ARRAY_DIMENSION_SCHEMA}},
            {"name": "elements", "type": {"type": "array", "items": leaf}},
        ],
    }


def is_general_array(schema: Any) -> bool:
    """Whether ``schema`` (a resolved type) is a general array record."""
    return (isinstance(schema, dict) and schema.get("type") == "record"
            and [f["name"] for f in schema.get("fields", ())] == GENERAL_ARRAY_FIELDS)


def array_branches(avro_type: Any, named: dict[str, dict]) -> tuple[dict, dict] | None:
    """``(declared array schema, general array record)`` when ``avro_type`` (nullable or not,
    references resolved through ``named``) is the union an array column has, else None."""
    if not isinstance(avro_type, list):
        return None
    rest = [named.get(b, b) if isinstance(b, str) else b for b in avro_type if b != "null"]
    if len(rest) != 2:
        return None
    declared, general = rest
    if isinstance(declared, dict) and declared.get("type") == "array" \
            and is_general_array(general):
        return declared, general
    return None


def nested_elements(value: dict[str, Any]) -> list:
    """A general array as nested lists, one level per dimension (the lower bounds dropped): for
    views whose targets have no array bounds."""
    items = value["elements"]
    lengths = [d["length"] for d in value["dimensions"]]
    for length in reversed(lengths[1:]):
        items = [items[i : i + length] for i in range(0, len(items), length)]
    return items


def _array_shape(nested: list, dims: int) -> list[int]:
    """The length of each of the ``dims`` dimensions of a parsed (rectangular) array."""
    lengths, level = [], nested
    for _ in range(dims):
        lengths.append(len(level))
        level = level[0] if level else []
    return lengths


def _flatten(nested: list, dims: int) -> list:
    for _ in range(dims - 1):
        nested = [x for sub in nested for x in sub]
    return nested


#: What PostgreSQL's array input skips as white space (array_isspace): ASCII only; Python's
#: str.isspace() would also take U+0085 and other characters PostgreSQL leaves unquoted.
_PG_SPACE = " \t\n\r\v\f"
_BOUNDS = re.compile(r"\[(-?\d+):(-?\d+)\]")


def _nested_reader(element: Callable[[str], Any], delim: str) -> Callable[[str], tuple[list, int]]:
    """``full(text)``: the nested lists and number of dimensions of an array literal whose
    elements ``element`` parses and ``delim`` separates."""
    quoted = re.compile(r'"((?:[^"\\]|\\.)*)"', re.S)
    unquoted = re.compile(r'(?:[^{}"\\' + re.escape(delim) + r"]|\\.)*", re.S)
    identity = element is ident

    def full(text: str) -> tuple[list, int]:
        """(nested lists, number of dimensions) of a general array literal."""
        n = len(text)
        root: list = []
        stack = [root]
        i = 1
        leaf_depth = 0  # the nesting depth at which elements sit: the dimensionality
        while True:
            if i >= n:
                raise ValueError("unterminated array")
            c = text[i]
            if c == "{":
                if leaf_depth and len(stack) >= leaf_depth:
                    raise ValueError("ragged array dimensions")
                child: list = []
                stack[-1].append(child)
                stack.append(child)
                i += 1
                continue
            if c == "}":
                stack.pop()
                i += 1
                if not stack:
                    break
                continue
            if c == delim or c in _PG_SPACE:
                i += 1
                continue
            depth = len(stack)
            if leaf_depth != depth:
                if leaf_depth or any(isinstance(x, list) for x in stack[-1]):
                    raise ValueError("ragged array dimensions")
                leaf_depth = depth
            if c == '"':
                m = quoted.match(text, i)
                if m is None:
                    raise ValueError("unterminated quoted array element")
                value = element(unescape(m.group(1)))
            else:
                m = unquoted.match(text, i)
                raw = m.group(0).strip(_PG_SPACE)
                if not raw:
                    raise ValueError(f"unexpected {c!r} in array")
                if raw.upper() == "NULL":
                    value = None
                else:
                    raw = unescape(raw)
                    value = raw if identity else element(raw)
            stack[-1].append(value)
            i = m.end()
        if text[i:].strip():
            raise ValueError("text after the array")
        if leaf_depth == 0 and root:
            raise ValueError("array of empty sub-arrays")
        return root, leaf_depth

    return full


def _general(nested: list, dims: int, lowers: list[int]) -> dict[str, Any]:
    """The general array record of parsed nested lists, given its lower bounds."""
    lengths = _array_shape(nested, dims)
    elements = _flatten(nested, dims)
    total = 1
    for length in lengths:
        total *= length
    if total != len(elements):
        raise ValueError("ragged array dimensions")
    return {
        "dimensions": [{"lower": lo, "length": n} for lo, n in zip(lowers, lengths,
                                                                    strict=True)],
        "elements": elements,
    }


def _decorated(text: str, full: Callable[[str], tuple[list, int]]) -> dict[str, Any]:
    """``[lo:hi]...={...}``: an array whose lower bounds are not all 1."""
    eq = text.index("=")
    bounds = [(int(a), int(b)) for a, b in _BOUNDS.findall(text, 0, eq)]
    if not bounds or "".join(f"[{a}:{b}]" for a, b in bounds) != text[:eq].replace(" ", ""):
        raise ValueError("bad array bounds decoration")
    body = text[eq + 1 :].strip()
    if body[:1] != "{" or body[-1:] != "}":
        raise ValueError("not an array literal")
    nested, dims = full(body)
    if dims != len(bounds):
        raise ValueError("the bounds decoration does not match the array's dimensions")
    value = _general(nested, dims, [lo for lo, _ in bounds])
    if [d["length"] for d in value["dimensions"]] != [hi - lo + 1 for lo, hi in bounds]:
        raise ValueError("the bounds decoration does not match the array's lengths")
    return value


def array_parser(
    element: Callable[[str], Any], delim: str, nesting: int, type_name: str
) -> Callable[[str], list | dict]:
    """A parser of PostgreSQL's array text output for a column declaring ``nesting``
    dimensions: nested lists when the value has that many dimensions, each starting at 1 (or is
    empty), else the general array record (dimensions and flat elements)."""
    full = _nested_reader(element, delim)
    identity = element is ident

    def parse(text: str) -> list | dict:
        if text[0] == "[":
            return _decorated(text, full)
        if text[0] != "{" or text[-1] != "}":
            raise ValueError("not an array literal")
        if nesting == 1 and '"' not in text and "\\" not in text and text.find("{", 1) < 0:
            body = text[1:-1]
            if not body:
                return []
            items = body.split(delim)
            if "NULL" not in body and "ull" not in body.lower():
                return items if identity else [element(x) for x in items]
            return [
                None if len(x) == 4 and x.upper() == "NULL" else x if identity else element(x)
                for x in items
            ]
        result, dims = full(text)
        if dims and dims != nesting:  # PostgreSQL does not enforce the declaration
            return _general(result, dims, [1] * dims)
        return result

    return parse
