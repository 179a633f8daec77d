"""The capture's publications: they hold exactly the tables it captures, each published in a way
PostgreSQL accepts without anything new from the application's tables.

PostgreSQL refuses UPDATE and DELETE on a table that a publication publishes updates or deletes
for, unless the table has a replica identity (a primary key, a replica-identity index, or
REPLICA IDENTITY FULL). So there is never a `FOR ALL TABLES` (nor `FOR TABLES IN SCHEMA`)
publication: a table with a replica identity goes to the main publication (named after the slot,
or --publication's name), and one without (allowed by --allow-unkeyed) to a second publication
that publishes only inserts and truncates, which PostgreSQL accepts for any table.

Without --tables, every ordinary table is captured, tables created later included: the stream
re-reads the catalog every few seconds and adds those that can be captured (see Watcher). A
--publication the user created is theirs: it is used as it is, never altered.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import psycopg
from psycopg import sql

from capture.source import database, versions
from capture.source.database import SETUP_DOC, SourceTable
from common.errors import BottlerError

log = logging.getLogger(__name__)

UNKEYED_SUFFIX = "_unkeyed"
PRIVATE_SCHEMA = "bottler"  # the replica's bookkeeping (offsets, owned tables), never captured
INSERTS_ONLY = "insert, truncate"  # what PostgreSQL publishes from any table

# Every ordinary, permanent table outside the system schemas, with what its replica identity
# allows. keyed: the capture has a key for it; safe: PostgreSQL may publish its updates.
CANDIDATES = """
select c.oid, n.nspname, c.relname,
       (c.relreplident in ('d', 'f') and coalesce(i.pk, false))
         or (c.relreplident = 'i' and coalesce(i.ri, false)) as keyed,
       c.relreplident = 'f' or (c.relreplident = 'd' and coalesce(i.pk, false))
         or (c.relreplident = 'i' and coalesce(i.ri, false)) as safe,
       has_schema_privilege(n.oid, 'USAGE') and has_table_privilege(c.oid, 'SELECT') as readable
from pg_class c
join pg_namespace n on n.oid = c.relnamespace
left join lateral (
    select bool_or(x.indisprimary) as pk, bool_or(x.indisreplident) as ri
    from pg_index x where x.indrelid = c.oid
) i on true
where c.relkind = 'r' and c.relpersistence = 'p'
  and n.nspname <> 'information_schema' and n.nspname not like 'pg\\_%'
order by n.nspname, c.relname
"""

MEMBERS = """
select c.oid, p.pubname
from pg_publication p
join pg_publication_rel r on r.prpubid = p.oid
join pg_class c on c.oid = r.prrelid
where p.pubname = any(%s)
"""


@dataclass(frozen=True)
class Candidate:
    oid: int
    schema: str
    name: str
    keyed: bool
    safe: bool
    readable: bool

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)


def unkeyed_name(main: str) -> str:
    return main[: 63 - len(UNKEYED_SUFFIX)] + UNKEYED_SUFFIX


class Publications:
    def __init__(self, conn: psycopg.Connection, slot: str, publication: str | None,
                 tables: list[str], allow_unkeyed: bool, generated_columns: str = "off"):
        self.conn = conn
        self.managed = publication is None  # the capture's own, else the user's as it is
        self.main = publication or slot
        self.unkeyed = unkeyed_name(self.main) if self.managed and allow_unkeyed else None
        self.tables = [_qualify(t) for t in tables]
        self.allow_unkeyed = allow_unkeyed
        self.asked_generated = generated_columns  # --generated-columns: auto, on or off
        self.generated = False  # stored generated columns published as values: check() says
        self._failed: set[int] = set()  # tables a scan could not move, named once

    # -- start-up: checks only, nothing is created ------------------------------------------
    def check(self) -> list[SourceTable]:
        """The tables to capture, after every check on them; raises with the fix."""
        self.generated = self._generated()
        if not self.managed:
            published = database.published_tables(self.conn, [self.main], self.tables,
                                                   self.generated)
            database.check_keys(published, self.allow_unkeyed)
            return published
        for name, in self.conn.execute(
                "select pubname from pg_publication where pubname = any(%s) and puballtables",
                ([n for n in (self.main, self.unkeyed) if n],)).fetchall():
            raise BottlerError(
                f"publication {name} is FOR ALL TABLES (made by an earlier version?): it makes "
                "PostgreSQL refuse UPDATE and DELETE on every table without a replica identity, "
                "and cannot be changed into a list of tables",
                f"drop it (DROP PUBLICATION {sql.Identifier(name).as_string(self.conn)};) and "
                f"the slot (bottler slot drop --slot <slot>), then run again: the capture "
                "creates a publication of exactly its tables and takes a new snapshot",
            )
        wanted = self.candidates()
        if self.tables:
            by_name = {c.qualified: c for c in wanted}
            if missing := [t for t in self.tables if t not in by_name]:
                raise BottlerError(
                    f"--tables names tables that do not exist (or are not ordinary, permanent "
                    f"tables): {', '.join(missing)}",
                    "name existing tables as schema.table (public. may be omitted)",
                )
            wanted = [by_name[t] for t in dict.fromkeys(self.tables)]
        published = database.describe(self.conn, [(c.oid, c.schema, c.name) for c in wanted],
                                    self.main, self.generated)
        database.check_keys(published, self.allow_unkeyed)
        return published

    def published(self, conn: psycopg.Connection) -> list[SourceTable]:
        """The tables the publications publish, as ``conn`` (inside a snapshot) sees them."""
        return database.published_tables(conn, self.existing(), [] if self.managed else self.tables,
                                         self.generated)

    def candidates(self) -> list[Candidate]:
        return [Candidate(*row) for row in self.conn.execute(CANDIDATES).fetchall()]

    # -- creating and keeping them exact ---------------------------------------------------
    def target(self, c: Candidate) -> str | None:
        """The publication a table belongs in, or None when it cannot be captured."""
        if c.keyed or (c.safe and self.allow_unkeyed):
            return self.main
        return self.unkeyed  # None without --allow-unkeyed

    def existing(self) -> list[str]:
        names = [n for n in (self.main, self.unkeyed) if n]
        found = {r[0] for r in self.conn.execute(
            "select pubname from pg_publication where pubname = any(%s)", (names,))}
        return [n for n in names if n in found]

    def create(self, with_tables: bool) -> list[str]:
        """Create the missing managed publications and return their names. ``with_tables`` (a
        new slot, whose snapshot copies them): holding every table to capture, refusing with
        the fix when that cannot be done; else empty, and the stream adds the tables with a
        copy of their rows."""
        if not self.managed:
            return []
        candidates = self.candidates()
        members: dict[str, list[Candidate]] = {n: [] for n in (self.main, self.unkeyed) if n}
        for c in candidates:
            if with_tables and (name := self.want(c)):
                members[name].append(c)
        exists = set(self.existing())
        created = []
        for name, cs in members.items():
            if name in exists:
                continue
            statement = sql.SQL("CREATE PUBLICATION {}").format(sql.Identifier(name))
            if cs:
                statement += sql.SQL(" FOR TABLE ") + sql.SQL(", ").join(c.ident for c in cs)
            options = [sql.SQL("publish = {}").format(sql.Literal(INSERTS_ONLY))
                       ] if name == self.unkeyed else []
            if self.generated:
                options.append(sql.SQL("publish_generated_columns = stored"))
            if options:
                statement += sql.SQL(" WITH ({})").format(sql.SQL(", ").join(options))
            self._create(name, statement)
            created.append(name)
        self._align_generated(exists)
        if with_tables and exists:
            self.sync(candidates, strict=True)
        return created

    def _generated(self) -> bool:
        """Whether generated columns are published: --generated-columns on the managed
        publications; a user's publication decides, and an explicit flag must agree with it."""
        version = self.conn.info.server_version
        wanted = versions.publishes_generated(self.asked_generated, version)
        if self.managed or version < versions.GENERATED_COLUMNS:
            return wanted
        row = self.conn.execute("select pubgencols = 's' from pg_publication where pubname = %s",
                                (self.main,)).fetchone()
        if row is None:
            return wanted  # published_tables says it does not exist
        if self.asked_generated != "auto" and row[0] != wanted:
            name = sql.Identifier(self.main).as_string(self.conn)
            raise BottlerError(
                f"publication {self.main} {'publishes' if row[0] else 'does not publish'} "
                f"generated columns, and --generated-columns is {self.asked_generated}",
                f"have its owner run ALTER PUBLICATION {name} SET (publish_generated_columns = "
                f"{'stored' if wanted else 'none'}); or pass --generated-columns auto",
            )
        return row[0]

    def _align_generated(self, names: set[str]) -> None:
        """The managed publications that exist publish generated columns as asked now (a
        restart with another --generated-columns: the stream's Relation messages follow)."""
        if self.conn.info.server_version < versions.GENERATED_COLUMNS or not names:
            return
        value = "s" if self.generated else "n"
        for name, in self.conn.execute(
                "select pubname from pg_publication where pubname = any(%s) and pubgencols <> %s",
                (sorted(names), value)).fetchall():
            self.conn.execute(sql.SQL("ALTER PUBLICATION {} SET (publish_generated_columns = {})")
                              .format(sql.Identifier(name),
                                      sql.SQL("stored" if self.generated else "none")))
            log.info("publication %s: generated columns %s", name,
                     "published" if self.generated else "no longer published")

    def want(self, c: Candidate) -> str | None:
        """Where a table belongs now: None when out of scope or not capturable."""
        if self.tables and c.qualified not in self.tables:
            return None
        if not self.tables and c.schema == PRIVATE_SCHEMA:
            return None  # a replica's bookkeeping in this database is not the application's data
        return self.target(c) if c.readable else None

    def _create(self, name: str, statement: sql.Composed) -> None:
        text = statement.as_string(self.conn)
        try:
            with self.conn.transaction():
                self.conn.execute(statement)
        except psycopg.errors.InsufficientPrivilege:
            raise BottlerError(
                f"publication {name} does not exist, and role {database.current_user(self.conn)} "
                "may not create it",
                f"have the tables' owner (or a superuser) run: {text}; then pass --publication "
                f"{name} (see {SETUP_DOC})",
            ) from None
        except psycopg.Error as exc:
            raise BottlerError(
                f"cannot create publication {name}: {database.first_line(exc)}",
                f"create it yourself ({text};) and pass --publication {name}",
            ) from None
        log.info("created publication %s", text)

    def sync(self, candidates: list[Candidate], strict: bool = False) -> list[Candidate]:
        """Move each table to the publication it belongs in now (or out of them); return the
        tables that joined (their rows need a copy). ``strict``: a table that cannot be moved
        is an error, else a warning (the next scan tries again)."""
        names = [n for n in (self.main, self.unkeyed) if n]
        members = dict(self.conn.execute(MEMBERS, (names,)).fetchall())
        joined = []
        for c in candidates:
            want, have = self.want(c), members.get(c.oid)
            if want == have:
                continue
            statements = [self._alter(name, action, c)
                          for name, action in ((have, "DROP"), (want, "ADD")) if name]
            try:
                with self.conn.transaction():
                    for statement in statements:
                        self.conn.execute(statement)
            except psycopg.Error as exc:
                fix = "; ".join(st.as_string(self.conn) for st in statements)
                if strict:
                    raise BottlerError(
                        f"cannot change the tables of publication {want or have}: "
                        f"{database.first_line(exc)}",
                        f"have the table's owner (or a superuser) run: {fix}; (see {SETUP_DOC})",
                    ) from None
                if c.oid not in self._failed:  # once, not at every scan
                    self._failed.add(c.oid)
                    log.warning("%s: %s; have its owner run: %s;", c.qualified,
                                database.first_line(exc), fix)
                continue
            self._failed.discard(c.oid)
            if want:
                joined.append(c)
            log.info("%s: %s", c.qualified, _why(c, want, have))
        return joined

    @staticmethod
    def _alter(name: str, action: str, c: Candidate) -> sql.Composed:
        return sql.SQL("ALTER PUBLICATION {} {} TABLE {}").format(
            sql.Identifier(name), sql.SQL(action), c.ident)


def _why(c: Candidate, want: str | None, have: str | None) -> str:
    if want and have:
        return f"moved from publication {have} to {want} (its replica identity changed)"
    if want:
        return f"added to publication {want}"
    if not c.readable:
        reason = "this role may not read it; GRANT SELECT on it to the capture's role"
    elif c.keyed or c.safe:
        reason = "it is not in --tables"
    else:
        reason = ("it has no primary key or replica-identity index (PostgreSQL would refuse its "
                  "updates); add one, or run with --allow-unkeyed")
    return f"removed from publication {have}: {reason}"


class Watcher:
    """Keeps the managed publications exact while the capture streams: new tables join (the
    caller snapshots them incrementally), tables whose replica identity changed move, and
    tables that cannot be captured are named once."""

    def __init__(self, publications: Publications):
        self.publications = publications
        self._told: set[int] = set()

    def changes(self) -> list[Candidate]:
        p = self.publications
        candidates = p.candidates()
        for c in candidates:
            if c.oid in self._told or (p.tables and c.qualified not in p.tables):
                continue
            if p.want(c) is None:
                self._told.add(c.oid)
                log.warning("%s is not captured: %s", c.qualified,
                            "this role may not read it (GRANT SELECT ON it to the capture's "
                            "role; it joins within seconds)" if not c.readable else
                            "it has no primary key or replica-identity index (add one and it "
                            "joins within seconds, or restart the capture with --allow-unkeyed)")
        joined = p.sync(candidates)
        self._told -= {c.oid for c in joined}
        return joined


def _qualify(table: str) -> str:
    return table if "." in table else f"public.{table}"
