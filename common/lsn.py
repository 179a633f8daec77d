"""A position in PostgreSQL's write-ahead log (``pg_lsn``): a 64-bit number, written ``X/Y`` (the
high and low 32 bits in hex). The one LSN type of every package: an ``int`` (so it orders, adds
and serializes as the number), whose text form is PostgreSQL's."""

from __future__ import annotations

from typing import Final

_MAX: Final = (1 << 64) - 1
_HEX: Final = frozenset("0123456789abcdefABCDEF")


class Lsn(int):
    __slots__ = ()

    def __new__(cls, value: int = 0) -> Lsn:
        if not 0 <= value <= _MAX:
            raise ValueError(f"LSN out of range: {value!r}")
        return super().__new__(cls, value)

    @classmethod
    def parse(cls, text: str) -> Lsn:
        """``"16/B374D848"`` → ``0x16B374D848``; accepts what PostgreSQL's pg_lsn input
        accepts."""
        hi, sep, lo = text.partition("/")
        if not (sep and 0 < len(hi) <= 8 and 0 < len(lo) <= 8 and _HEX.issuperset(hi + lo)):
            raise ValueError(f"not an LSN: {text!r}")
        return cls((int(hi, 16) << 32) | int(lo, 16))

    def __str__(self) -> str:
        """PostgreSQL's text form: ``0x16B374D848`` → ``"16/B374D848"``."""
        return f"{self >> 32:X}/{self & 0xFFFFFFFF:X}"

    def __format__(self, spec: str) -> str:
        return str(self) if not spec else super().__format__(spec)

    def __repr__(self) -> str:
        return f"Lsn('{self}')"
