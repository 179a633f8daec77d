"""What the replica does not carry onto the tables it creates, brought over at cutover from the
source's catalog: sequences (their definitions, owners and values at the fence), identity
columns, column defaults and CHECK constraints.

``pg_dump --section=post-data`` does not have these: ``pg_dump`` writes them inside or beside the
``CREATE TABLE`` of its pre-data section, which cannot run against tables that exist. Each object
already in the target is left as it is; the sequences' values are set, never backwards (a target
sequence past the source's keeps its value: the values it gave out must not come again).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

from bottler.migrate.catalog import SYSTEM_SCHEMAS


@dataclass
class SequenceSet:
    name: str  # the target's sequence, schema.name
    value: int  # setval's value
    is_called: bool
    source_value: int | None  # the source's last_value at the fence (None: never used)
    created: str = ""  # how it was created in the target ("", "sequence", "identity")


@dataclass
class Definitions:
    """What was done, for the report."""

    sequences: list[SequenceSet] = field(default_factory=list)
    created: list[str] = field(default_factory=list)  # "default public.orders.status", ...
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def _qualified(schema: str, name: str) -> sql.Composable:
    return sql.Identifier(schema, name)


_SEQUENCES = """
select n.nspname, c.relname, format_type(s.seqtypid, null), s.seqstart, s.seqincrement,
       s.seqmin, s.seqmax, s.seqcache, s.seqcycle, ps.last_value,
       d.deptype, tn.nspname, t.relname, a.attname, a.attidentity
from pg_sequence s
join pg_class c on c.oid = s.seqrelid
join pg_namespace n on n.oid = c.relnamespace
left join pg_sequences ps on ps.schemaname = n.nspname and ps.sequencename = c.relname
left join pg_depend d on d.classid = 'pg_class'::regclass and d.objid = c.oid
     and d.refclassid = 'pg_class'::regclass and d.deptype in ('a', 'i')
left join pg_class t on t.oid = d.refobjid
left join pg_namespace tn on tn.oid = t.relnamespace
left join pg_attribute a on a.attrelid = d.refobjid and a.attnum = d.refobjsubid
where n.nspname <> all(%s)
order by 1, 2"""

_DEFAULTS = """
select n.nspname, c.relname, a.attname, pg_get_expr(d.adbin, d.adrelid)
from pg_attrdef d
join pg_attribute a on a.attrelid = d.adrelid and a.attnum = d.adnum
join pg_class c on c.oid = d.adrelid
join pg_namespace n on n.oid = c.relnamespace
where n.nspname <> all(%s) and c.relkind in ('r', 'p') and not c.relispartition
  and a.attgenerated = '' and a.attidentity = '' and not a.attisdropped
order by 1, 2, a.attnum"""

_GENERATED = """
select n.nspname, c.relname, a.attname from pg_attribute a
join pg_class c on c.oid = a.attrelid join pg_namespace n on n.oid = c.relnamespace
where n.nspname <> all(%s) and c.relkind in ('r', 'p') and a.attgenerated <> ''
  and not a.attisdropped"""

_CHECKS = """
select n.nspname, c.relname, co.conname, pg_get_constraintdef(co.oid), co.convalidated
from pg_constraint co
join pg_class c on c.oid = co.conrelid
join pg_namespace n on n.oid = c.relnamespace
where co.contype = 'c' and co.conislocal and n.nspname <> all(%s)
  and c.relkind in ('r', 'p') and not c.relispartition
order by 1, 2, 3"""


def _target_column(dst: psycopg.Connection, schema: str, table: str, column: str):
    """(has a default?, identity kind) of the target's column, None if there is none."""
    return dst.execute(
        """select exists (select 1 from pg_attrdef d where d.adrelid = a.attrelid
                          and d.adnum = a.attnum), a.attidentity
           from pg_attribute a join pg_class c on c.oid = a.attrelid
           join pg_namespace n on n.oid = c.relnamespace
           where n.nspname = %s and c.relname = %s and a.attname = %s and not a.attisdropped""",
        (schema, table, column)).fetchone()


def _generated_note(dst: psycopg.Connection, schema: str, table: str, column: str) -> str | None:
    """What the target lacks of a column the source generates: None if it generates it too."""
    row = dst.execute(
        "select a.attgenerated <> '' from pg_attribute a join pg_class c on c.oid = a.attrelid"
        " join pg_namespace n on n.oid = c.relnamespace"
        " where n.nspname = %s and c.relname = %s and a.attname = %s and not a.attisdropped",
        (schema, table, column)).fetchone()
    name = f"{schema}.{table}.{column}"
    if row is None:
        return (f"{name} is a generated column in the source and missing in the target (the "
                "capture publishes generated columns from PostgreSQL 18): add it "
                "(ALTER TABLE ... ADD COLUMN ... GENERATED ALWAYS AS (...) STORED)")
    if not row[0]:
        return (f"{name} is a generated column in the source and a plain one in the target "
                "(PostgreSQL cannot make a column generated after the fact)")
    return None


def _sequence_exists(dst: psycopg.Connection, schema: str, name: str) -> bool:
    return dst.execute(
        """select 1 from pg_class c join pg_namespace n on n.oid = c.relnamespace
           where n.nspname = %s and c.relname = %s and c.relkind = 'S'""",
        (schema, name)).fetchone() is not None


def _ahead(dst: psycopg.Connection, regclass: str, value: int, increment: int) -> int | None:
    """The target sequence's last value if it gave out values at or past ``value`` (in its
    direction), else None."""
    row = dst.execute(sql.SQL("select last_value, is_called from {}").format(
        sql.SQL(regclass)), ()).fetchone()
    if row is None or not row[1]:
        return None
    last, _ = row
    return last if (last >= value if increment > 0 else last <= value) else None


def _options(start, increment, minimum, maximum, cache, cycle) -> sql.Composable:
    return sql.SQL("start with {} increment by {} minvalue {} maxvalue {} cache {} {}").format(
        sql.Literal(start), sql.Literal(increment), sql.Literal(minimum), sql.Literal(maximum),
        sql.Literal(cache), sql.SQL("cycle" if cycle else "no cycle"))


def carry(src: psycopg.Connection, dst: psycopg.Connection, margin: int = 0,
          progress=print) -> Definitions:
    """Bring sequences (with their values), identity columns, defaults and CHECK constraints
    from ``src`` to ``dst`` (autocommit connections; the source is read as it is now, at the
    fence)."""
    started = time.monotonic()
    done = Definitions()
    system = list(SYSTEM_SCHEMAS)
    # Expressions fully qualified, so they mean the same thing in the target.
    src.execute("select set_config('search_path', '', false)")
    sequences = src.execute(_SEQUENCES, (system,)).fetchall()
    defaults = src.execute(_DEFAULTS, (system,)).fetchall()
    checks = src.execute(_CHECKS, (system,)).fetchall()
    generated = src.execute(_GENERATED, (system,)).fetchall()
    src.execute("select set_config('search_path', '\"$user\", public', false)")

    def run(statement: sql.Composable, what: str) -> None:
        dst.execute(statement)
        done.created.append(what)
        progress(f"  created {what}")

    # Sequences first (defaults may call nextval on them), then defaults, then ownership.
    owned = _carry_sequences(dst, sequences, margin, run, done)
    for schema, table, column, expression in defaults:
        has = _target_column(dst, schema, table, column)
        if has is None or has[0]:
            continue
        run(sql.SQL("alter table {} alter column {} set default {}").format(
            _qualified(schema, table), sql.Identifier(column), sql.SQL(expression)),
            f"default {schema}.{table}.{column}")
    for schema, name, t_schema, t_name, column in owned:
        if _target_column(dst, t_schema, t_name, column) is not None:
            dst.execute(sql.SQL("alter sequence {} owned by {}").format(
                _qualified(schema, name), sql.Identifier(t_schema, t_name, column)))
    _carry_checks(dst, checks, run)
    for schema, table, column in generated:
        if note := _generated_note(dst, schema, table, column):
            done.notes.append(note)
    done.seconds = time.monotonic() - started
    return done


def _carry_sequences(dst: psycopg.Connection, sequences: list, margin: int,
                     run: Callable[[sql.Composable, str], None], done: Definitions) -> list:
    """Create or set the target's sequences (identity ones included) from the source's
    ``sequences``; the sequences owned by a column, to mark so once the defaults are in."""
    owned = []
    for (schema, name, type_, start, increment, minimum, maximum, cache, cycle, last,
         deptype, t_schema, t_name, column, identity) in sequences:
        options = _options(start, increment, minimum, maximum, cache, cycle)
        target_name = f"{schema}.{name}"
        created = ""
        if deptype == "i":
            has = _target_column(dst, t_schema, t_name, column)
            if has is None:
                done.notes.append(f"identity column {t_schema}.{t_name}.{column} is not in the "
                                  "target: sequence not set")
                continue
            if not has[1]:
                kind = "always" if identity == "a" else "by default"
                run(sql.SQL("alter table {} alter column {} add generated " + kind
                            + " as identity (sequence name {} {})").format(
                    _qualified(t_schema, t_name), sql.Identifier(column),
                    _qualified(schema, name), options),
                    f"identity {t_schema}.{t_name}.{column} (generated {kind})")
                created = "identity"
            target_name = dst.execute("select pg_get_serial_sequence(%s, %s)", (
                sql.Identifier(t_schema, t_name).as_string(dst), column)).fetchone()[0]
        elif not _sequence_exists(dst, schema, name):
            run(sql.SQL("create sequence {} as {} {}").format(
                _qualified(schema, name), sql.SQL(type_), options), f"sequence {target_name}")
            created = "sequence"
        if deptype == "a" and column is not None:
            owned.append((schema, name, t_schema, t_name, column))
        if last is None:
            value, is_called = start, False
        else:
            value, is_called = last + margin * (1 if increment > 0 else -1), True
            value = max(minimum, min(maximum, value))
        regclass = (target_name if deptype == "i" else
                    sql.Identifier(schema, name).as_string(dst))
        ahead = _ahead(dst, regclass, value, increment) if not created else None
        if ahead is not None:  # never backwards: the values it gave out would come again
            done.notes.append(f"sequence {target_name} kept at {ahead}: the target's is past the"
                              f" source's ({value})")
            value, is_called = ahead, True
        else:
            dst.execute("select setval(%s::regclass, %s, %s)", (regclass, value, is_called))
        done.sequences.append(SequenceSet(target_name, value, is_called, last, created))
    return owned


def _carry_checks(dst: psycopg.Connection, checks: list,
                  run: Callable[[sql.Composable, str], None]) -> None:
    """Add the source's CHECK constraints the target lacks: NOT VALID, then validated."""
    for schema, table, name, definition, validated in checks:
        exists = dst.execute(
            """select 1 from pg_constraint co join pg_class c on c.oid = co.conrelid
               join pg_namespace n on n.oid = c.relnamespace
               where n.nspname = %s and c.relname = %s and co.conname = %s""",
            (schema, table, name)).fetchone()
        if exists:
            continue
        # NOT VALID first (instant), then VALIDATE (reads the table under a light lock).
        suffix = "" if definition.endswith("NOT VALID") else " NOT VALID"
        run(sql.SQL("alter table {} add constraint {} {}").format(
            _qualified(schema, table), sql.Identifier(name), sql.SQL(definition + suffix)),
            f"check constraint {schema}.{table}.{name}")
        if validated:
            dst.execute(sql.SQL("alter table {} validate constraint {}").format(
                _qualified(schema, table), sql.Identifier(name)))
