"""hstore: its text output parsed into an Avro map of nullable strings."""

from __future__ import annotations

import re

from schemas.pgtypes.scalars import unescape

_HSTORE_PAIR = re.compile(
    r'\s*"((?:[^"\\]|\\.)*)"\s*=>\s*(?:"((?:[^"\\]|\\.)*)"|(NULL))\s*(?:,|\Z)', re.S | re.I
)


def parse_hstore(text: str) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    i, n = 0, len(text)
    while i < n:
        m = _HSTORE_PAIR.match(text, i)
        if m is None:
            if not text[i:].strip():
                break
            raise ValueError("not an hstore literal")
        key, value, null = m.groups()
        out[unescape(key)] = None if null else unescape(value)
        i = m.end()
    return out
