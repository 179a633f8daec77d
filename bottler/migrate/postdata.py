"""The source's post-data schema objects (constraints, foreign keys, indexes, triggers, rules)
from ``pg_dump --section=post-data``, applied to the target one by one, with progress.

Foreign keys are added ``NOT VALID`` (instant) and then validated (a scan under a light lock).
An object already in the target (the primary keys the replica created, or anything a previous
run created) is reported as present. Publications and subscriptions are the source's
replication setup, not the application's: they are skipped.
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
from dataclasses import dataclass, field

import psycopg

from common.errors import BottlerError
from common.pg import client_args
from common.pgclients import candidates, client_for, major_of
from common.redact import redact

SKIPPED_TYPES = {"PUBLICATION", "PUBLICATION TABLE", "PUBLICATION TABLES IN SCHEMA",
                 "SUBSCRIPTION", "SUBSCRIPTION TABLE"}
# Errors that mean "it is there already": duplicate object or relation, a second primary key.
PRESENT = (psycopg.errors.DuplicateObject, psycopg.errors.DuplicateTable,
           psycopg.errors.InvalidTableDefinition)

_HEADER = re.compile(r"^--\n-- Name: (?P<name>.*); Type: (?P<type>.*); Schema: (?P<schema>.*);"
                     r" Owner: .*\n--\n", re.MULTILINE)
_FK = re.compile(r"^ALTER TABLE (?:ONLY )?(?P<table>.+?)\s+ADD CONSTRAINT "
                 r"(?P<name>\"(?:[^\"]|\"\")+\"|\S+) FOREIGN KEY", re.DOTALL)


@dataclass
class Entry:
    type: str  # pg_dump's: CONSTRAINT, FK CONSTRAINT, INDEX, TRIGGER, ...
    name: str
    schema: str
    statement: str
    outcome: str = ""  # created, present, skipped, failed
    error: str = ""
    seconds: float = 0.0

    @property
    def label(self) -> str:
        return f"{self.type} {self.schema}.{self.name}" if self.schema != "-" else \
            f"{self.type} {self.name}"


@dataclass
class PostData:
    entries: list[Entry] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[Entry]:
        return [e for e in self.entries if e.outcome == "failed"]


def pg_dump_problem(server_version: int) -> str | None:
    """Why no ``pg_dump`` here can dump this server (``server_version_num``), or None."""
    if client_for("pg_dump", server_version) is not None:
        return None
    found = [f"{major_of(p)} ({p})" for p in candidates("pg_dump")]
    if not found:
        return ("pg_dump is not installed: install the PostgreSQL client tools (Debian: "
                "postgresql-client)")
    server_major = server_version // 10000
    return (f"pg_dump {', '.join(found)} cannot dump a PostgreSQL {server_major} server: install "
            f"postgresql-client-{server_major} (or newer) and put its pg_dump first on PATH")


def dump(source_dsn: str, server_version: int) -> str:
    program = client_for("pg_dump", server_version)
    if program is None:
        raise BottlerError(f"pg_dump: {pg_dump_problem(server_version)}")
    dsn, env = client_args(source_dsn)
    done = subprocess.run(
        [str(program), "--section=post-data", "--no-owner", "--no-privileges",
         "--exclude-schema=bottler", "--dbname", dsn],
        capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise BottlerError(f"pg_dump --section=post-data failed: {redact(done.stderr.strip())}",
                           "check that the cutover's role can read the source's catalog")
    return done.stdout


def _sql(text: str) -> str:
    """SQL of a dump fragment: without comments, blank lines and psql meta-commands
    (``\\restrict``)."""
    return "\n".join(line for line in text.splitlines()
                     if line.strip() and not line.startswith(("--", "\\"))).strip()


def parse(text: str) -> tuple[str, list[Entry]]:
    """(the settings before the first object, the objects in dump order)."""
    headers = list(_HEADER.finditer(text))
    preamble = _sql(text[: headers[0].start()] if headers else text)
    entries = []
    for i, header in enumerate(headers):
        end = headers[i + 1].start() if i + 1 < len(headers) else len(text)
        statement = _sql(text[header.end(): end])
        if statement:
            entries.append(Entry(header["type"], header["name"], header["schema"], statement))
    return preamble, entries


def _settings(conn: psycopg.Connection, preamble: str) -> None:
    """The dump's session settings, one by one: a setting the target does not know, from a
    pg_dump newer than it (17's transaction_timeout, dumped for a target of 16), is left out;
    the target could not have it anyway."""
    for statement in re.split(r";\s*\n", preamble + "\n"):
        if statement.strip():
            # UndefinedObject: unrecognized configuration parameter
            with contextlib.suppress(psycopg.errors.UndefinedObject):
                conn.execute(statement)


def apply(conn: psycopg.Connection, text: str, progress=print) -> PostData:
    """Apply the dump's objects to the target (an autocommit connection), foreign keys last."""
    started = time.monotonic()
    preamble, entries = parse(text)
    _settings(conn, preamble)
    result = PostData(entries)
    foreign = []
    ordered = [e for e in entries if e.type != "FK CONSTRAINT"] + \
        [e for e in entries if e.type == "FK CONSTRAINT"]
    for n, entry in enumerate(ordered, 1):
        t0 = time.monotonic()
        statement = entry.statement
        fk = _FK.match(statement) if entry.type == "FK CONSTRAINT" else None
        if entry.type in SKIPPED_TYPES:
            entry.outcome = "skipped"
        else:
            if fk and not statement.rstrip(";").endswith("NOT VALID"):
                statement = statement.rstrip().rstrip(";") + " NOT VALID;"
            try:
                conn.execute(statement)
                entry.outcome = "created"
            except PRESENT:
                entry.outcome = "present"
            except psycopg.Error as exc:
                entry.outcome, entry.error = "failed", redact(str(exc).strip())
            if fk and entry.outcome in ("created", "present"):
                foreign.append((entry, fk))
        entry.seconds = time.monotonic() - t0
        progress(f"  [{n}/{len(ordered)}] {entry.label}: {entry.outcome}"
                 + (f" ({entry.error})" if entry.error else "")
                 + (" NOT VALID" if fk and entry.outcome == "created" else "")
                 + f" {entry.seconds:.2f}s")
    for entry, fk in foreign:
        t0 = time.monotonic()
        try:
            conn.execute(f"ALTER TABLE {fk['table']} VALIDATE CONSTRAINT {fk['name']}")
            if entry.outcome == "created":
                entry.outcome = "created, validated"
            else:
                entry.outcome = "present, validated"
        except psycopg.Error as exc:
            entry.outcome, entry.error = "failed", "validate: " + redact(str(exc).strip())
        entry.seconds += time.monotonic() - t0
        progress(f"  validate {entry.label}: {entry.outcome}"
                 + (f" ({entry.error})" if entry.error else "")
                 + f" {time.monotonic() - t0:.2f}s")
    result.seconds = time.monotonic() - started
    return result
