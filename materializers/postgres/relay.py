"""One ``COPY`` piped from a source server into a target server through two ``psql``
processes, as ``pg_dump | psql`` does: no row passes through Python. Relaying the rows in
Python cost about one CPU second per million rows, as much as both servers' own work, and
with it the seed's copy ran at 0.55× ``pg_dump | psql`` (docs/migration.md has the figures).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from dataclasses import dataclass

from common.children import die_with_parent
from common.errors import BottlerError
from common.pg import client_args
from common.redact import redact

_ERROR = re.compile(r"^ERROR:\s+(?P<state>[0-9A-Z]{5}): (?P<message>.*)$", re.MULTILINE)
_COPIED = re.compile(r"^COPY (\d+)$", re.MULTILINE)
POLL = 0.1  # seconds between looks at the stop event while a copy runs


class Refused(Exception):  # noqa: N818 - the target's verdict on the rows, not a failure
    """The target refused the rows (a data or integrity error): nothing of them is kept."""


class Stopped(Exception):  # noqa: N818 - a stop request, not an error
    """The stop event was set: both processes are gone and nothing of the copy is kept."""


@dataclass(frozen=True)
class Side:
    """One end of the pipe: a server and the statements run before the ``COPY``."""

    dsn: str
    setup: tuple[str, ...] = ()
    options: str = ""  # libpq ``options`` (``-c name=value ...``): session settings
    application_name: str = "bottler"


def problem() -> str | None:
    """Why the relay cannot run here, or None."""
    if shutil.which("psql") is None:
        return ("psql is not installed: install the PostgreSQL client tools (Debian:"
                " postgresql-client)")
    return None


def copy(source: Side, out_sql: str, target: Side, in_sql: str,
         stop: threading.Event) -> int:
    """Runs ``out_sql`` (a ``COPY … TO STDOUT``) on the source into ``in_sql`` (a ``COPY … FROM
    STDIN``) on the target, which commits it; returns the rows copied. Raises :class:`Refused`
    if the target refused the rows, :class:`Stopped` on ``stop``, :class:`BottlerError` for
    anything else, the target having then kept nothing or, if the source failed mid-way, part of
    the rows: the caller copies the range again from an emptied table."""
    # quiet: the reader's stdout is the rows alone (no BEGIN, SET); the writer says COPY n
    reader = _start(source, out_sql, stdin=subprocess.DEVNULL, quiet=True)
    try:
        writer = _start(target, in_sql, stdin=reader.stdout, quiet=False)
    except BaseException:
        _end(reader)
        raise
    reader.stdout.close()  # the writer's now: the reader sees a closed pipe if the writer dies
    try:
        written = _wait(writer, stop)
        read = _wait(reader, stop)
    finally:
        _end(writer)
        _end(reader)
    # The source failing first ends the target's input early (a COPY it may commit, or refuse
    # as cut short): the source's error, if its server said one, is the cause. Otherwise a
    # reader that failed only lost its pipe to the failed writer.
    if reader.returncode != 0 and (writer.returncode == 0 or _ERROR.search(read)):
        raise _failed("the source's COPY", source.dsn, read)
    if writer.returncode != 0:
        found = _ERROR.search(written)
        if found and found["state"][:2] in ("22", "23"):  # data exception, integrity
            raise Refused(found["message"])
        raise _failed("the target's COPY", target.dsn, written)
    copied = _COPIED.search(written)
    if copied is None:
        raise BottlerError(f"psql did not report the rows it copied: {redact(written)!r}")
    return int(copied[1])


def _start(side: Side, statement: str, stdin, quiet: bool) -> subprocess.Popen:
    dsn, env = client_args(side.dsn)
    env.update(PGAPPNAME=side.application_name, PGOPTIONS=side.options)
    command = ["psql", "--no-psqlrc", "--set", "ON_ERROR_STOP=1", "--set", "VERBOSITY=verbose",
               *(["--quiet"] if quiet else []), "--dbname", dsn]
    for step in (*side.setup, statement):
        command += ["--command", step]
    parent = os.getpid()
    return subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env,
                            preexec_fn=lambda: die_with_parent(parent))


def _wait(process: subprocess.Popen, stop: threading.Event) -> str:
    """What the process said (stdout then stderr; the reader's stdout is the writer's), once
    it has ended; raises :class:`Stopped` if ``stop`` is set first."""
    while True:
        if stop.is_set():
            raise Stopped()
        try:
            out, err = process.communicate(timeout=POLL)
        except subprocess.TimeoutExpired:
            continue
        return "\n".join(part.decode(errors="replace") for part in (out, err) if part)


def _end(process: subprocess.Popen) -> None:
    """Kills the process if it still runs (the server rolls its COPY back) and reaps it."""
    if process.poll() is None:
        process.kill()
    process.wait()


def _failed(what: str, dsn: str, said: str) -> BottlerError:
    found = _ERROR.search(said)
    reason = found["message"] if found else (said.strip().splitlines() or ["no message"])[-1]
    return BottlerError(f"{what} failed ({redact(dsn)}): {redact(reason)}",
                        "check that the server is up and the role may read (source) or write"
                        " (target) the table; the seed copies the table again at its next"
                        " start")
