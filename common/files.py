"""Reading the user's text files (a config file, a users file, a mapping file): whatever makes
one unreadable (missing, a directory, no permission, not UTF-8) is one line naming the file."""

from __future__ import annotations

from pathlib import Path

from common.errors import BottlerError


def read_text(path: Path, what: str, hint: str) -> str:
    """The UTF-8 text of ``path``, ``what`` it is (e.g. "config file") named in the error."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise BottlerError(f"{what} {path} not found", hint) from None
    except IsADirectoryError:
        raise BottlerError(f"{what} {path} is a directory, not a file", hint) from None
    except OSError as exc:
        raise BottlerError(f"cannot read {what} {path}: {exc.strerror or exc}", hint) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise BottlerError(f"{what} {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} on "
                           f"line {line})", f"save it as UTF-8; {hint}") from None
