"""Ranges and multiranges: the Avro record of a range type, and the parsers of their text
output."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from schemas.pgtypes.avro import avro_name, nullable, type_namespace
from schemas.pgtypes.model import PgType


def range_schema(rng: PgType, bound: Any) -> dict:
    bound_type = nullable(bound)
    return {
        "type": "record",
        "name": avro_name(rng.name, stable=True),
        "namespace": type_namespace(rng),
        "doc": f"PostgreSQL range {rng.schema}.{rng.name}; a null bound is unbounded.",
        "fields": [
            {"name": "empty", "type": "boolean"},
            {"name": "lower", "type": bound_type},
            {"name": "upper", "type": bound_type},
            {"name": "lower_inclusive", "type": "boolean"},
            {"name": "upper_inclusive", "type": "boolean"},
        ],
    }


def _range_bound(text: str, i: int, stops: str) -> tuple[str | None, int]:
    """One range bound starting at ``i``: ``(text or None when omitted, index after it)``."""
    n = len(text)
    if i < n and text[i] in stops:
        return None, i
    out: list[str] = []
    in_quotes = False
    while i < n:
        c = text[i]
        if in_quotes:
            if c == "\\" and i + 1 < n:
                out.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                if i + 1 < n and text[i + 1] == '"':
                    out.append('"')
                    i += 2
                    continue
                in_quotes = False
                i += 1
                continue
            out.append(c)
            i += 1
            continue
        if c in stops:
            return "".join(out), i
        if c == '"':
            in_quotes = True
        elif c == "\\" and i + 1 < n:
            out.append(text[i + 1])
            i += 1
        else:
            out.append(c)
        i += 1
    raise ValueError("unterminated range")


def _empty_range() -> dict[str, Any]:
    return {
        "empty": True,
        "lower": None,
        "upper": None,
        "lower_inclusive": False,
        "upper_inclusive": False,
    }


def _range_at(text: str, i: int, bound: Callable[[str], Any]) -> tuple[dict[str, Any], int]:
    if text.startswith("empty", i):
        return _empty_range(), i + 5
    opener = text[i]
    if opener != "[" and opener != "(":
        raise ValueError("not a range literal")
    lower, i = _range_bound(text, i + 1, ",")
    upper, i = _range_bound(text, i + 1, ")]")
    closer = text[i]
    return {
        "empty": False,
        "lower": None if lower is None else bound(lower),
        "upper": None if upper is None else bound(upper),
        "lower_inclusive": opener == "[",
        "upper_inclusive": closer == "]",
    }, i + 1


def range_parser(bound: Callable[[str], Any]) -> Callable[[str], dict]:
    def parse(text: str) -> dict[str, Any]:
        value, end = _range_at(text, 0, bound)
        if end != len(text):
            raise ValueError("text after the range")
        return value

    return parse


def multirange_parser(bound: Callable[[str], Any]) -> Callable[[str], list]:
    def parse(text: str) -> list[dict[str, Any]]:
        if text[0] != "{" or text[-1] != "}":
            raise ValueError("not a multirange literal")
        out: list[dict[str, Any]] = []
        i, n = 1, len(text) - 1
        while i < n:
            c = text[i]
            if c == "," or c.isspace():
                i += 1
                continue
            value, i = _range_at(text, i, bound)
            out.append(value)
        return out

    return parse
