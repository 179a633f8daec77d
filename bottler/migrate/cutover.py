"""`bottler migrate cutover`: from "writes stopped" to "go" or "no-go" in one command.

1. Preconditions, each one line: the capture's slot held and the fence writable, the replica
   caught up within a bound, every source table in the target with the same columns and key,
   no long-running or prepared transaction in the source, pg_dump able to dump the source, the
   fence roles fit for fencing. ``--dry-run`` stops here.
2. The fence (fence.py): the application's roles fenced out if given, a fence message written
   into the WAL, the capture's confirmation of it awaited, then the replica's stored offsets
   passing the topics' end offsets of that moment.
3. Verify at the fence (verify.py): any difference is a no-go listing the keys.
4. The replica must be stopped (its session gone from the target) before the schema changes:
   identity columns, triggers and foreign keys would break its writes.
5. Sequences (their values at the fence), identity columns, defaults, CHECK constraints
   (definitions.py); then pg_dump's post-data objects (postdata.py).
6. A closing fence proves nothing was written to the source since the first; the verdict.

A capture on a hot standby has its slot there: the standby is the source (the slot, verify,
the dumps) and the fence, the fence roles, the open transactions and the sequences' values are
its primary's (``primary``, as the capture's --primary, checked as the capture checks it).

On no-go the fenced roles get their connection limits back; on go they stay fenced out of the
old database (the report says how to undo it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg

from bottler.migrate import definitions, fence, postdata
from bottler.migrate.catalog import table_info, user_tables
from bottler.migrate.status import status
from bottler.migrate.verify import VerifyReport, verify
from capture.source import standby
from common.errors import BottlerError
from common.kafka import Connection
from common.lsn import Lsn
from common.pg import connect, emit_message_function
from common.redact import redact
from materializers.postgres import APPLICATION_NAME as REPLICA_APPLICATION_NAME
from materializers.postgres import DEFAULT_GROUP
from schemas.topics import TRUNCATE, table_topic, with_prefix

GO, NO_GO, READY, NOT_READY = "go", "no-go", "ready (dry run)", "not ready (dry run)"


@dataclass
class Options:
    source: str
    target: str
    broker: Connection  # bootstrap servers, or the Kafka client properties
    prefix: str = ""
    group: str = DEFAULT_GROUP
    slot: str = "bottler"
    dry_run: bool = False
    sequence_margin: int = 0
    fence_roles: list[str] = field(default_factory=list)
    max_lag: int = 1000  # messages the replica may be behind for the preconditions to pass
    max_transaction_seconds: float = 60.0
    fence_timeout: float = 300.0
    replica_stop_timeout: float = 300.0
    max_keys: int = 20
    primary: str | None = None  # the source's primary when the source is a standby


@dataclass
class Check:
    ok: bool
    what: str


@dataclass
class Cutover:
    """Everything the report shows."""

    options: Options
    started: float = field(default_factory=time.time)
    preconditions: list[Check] = field(default_factory=list)
    steps: list[tuple[str, float]] = field(default_factory=list)  # (step, seconds)
    writes_stopped_at: float | None = None  # the fence roles fenced out (None: by the user)
    fence_lsn: str = ""
    fence_at: float | None = None
    positions: dict[str, dict[int, int]] = field(default_factory=dict)
    verify: VerifyReport | None = None
    definitions: definitions.Definitions | None = None
    postdata: postdata.PostData | None = None
    verdict: str = ""
    reasons: list[str] = field(default_factory=list)
    verdict_at: float | None = None
    roles_fenced: list[str] = field(default_factory=list)
    roles_restored: bool = False
    sessions_ended: int = 0

    @property
    def downtime(self) -> float | None:
        """Seconds from the fence (or the roles' fencing, earlier) to the verdict: the
        write-downtime window."""
        begin = self.writes_stopped_at or self.fence_at
        if begin is None or self.verdict_at is None:
            return None
        return self.verdict_at - begin


def _table_topics(src: psycopg.Connection, prefix: str) -> dict[str, str]:
    return {table_topic(prefix, s, t): f"{s}.{t}" for s, t in user_tables(src)}


def preconditions(o: Options, src: psycopg.Connection, dst: psycopg.Connection,
                  writer: psycopg.Connection) -> list[Check]:
    """``writer``: where the fence is written, the source itself or its primary."""
    checks: list[Check] = []
    # The capture holds its slot: the fence can be confirmed.
    state = fence.slot_confirmed(src, o.slot)
    if state is None:
        checks.append(Check(False, f"capture: no replication slot {o.slot} in the source "
                                   "(pass the capture's --slot; a capture on a standby: the "
                                   "standby as --source, its primary as --primary)"))
    else:
        confirmed, active = state
        checks.append(Check(bool(active), f"capture: slot {o.slot} "
                            + ("held by a running capture" if active else
                               "not held by any capture: start `bottler capture`")
                            + (f", confirmed up to {Lsn(confirmed)}"
                               if confirmed else "")))
    can_emit = writer.execute("select has_function_privilege(%s, 'execute')",
                              (emit_message_function(writer),)).fetchone()[0]
    checks.append(Check(can_emit, "fence: this role may call pg_logical_emit_message"
                        if can_emit else "fence: this role may not call "
                        "pg_logical_emit_message: run the cutover as a superuser or grant it"))
    # The replica is caught up within the bound.
    report = status(o.source, o.target, o.broker, o.prefix, o.group)
    missing_topics = [t.qualified for t in report.tables if not t.topic_exists]
    if not report.offsets_table:
        checks.append(Check(False, "replica: the target has no bottler.offsets: the replica "
                                   "has written nothing yet"))
    elif report.tables and len(missing_topics) == len(report.tables):
        checks.append(Check(False, "replica: no table has a topic: check --prefix"))
    else:
        # A table without a topic had nothing published (a capture started with
        # --skip-snapshot, as when going back): verify at the fence still compares it.
        checks.append(Check(report.lag <= o.max_lag,
                            f"replica: {report.lag:,} messages behind (bound {o.max_lag:,}, "
                            f"group {o.group})" + (
                                "; nothing published yet for " + ", ".join(missing_topics)
                                if missing_topics else "")))
    checks.append(_tables_check(src, dst))
    checks.append(_transactions_check(o, writer))
    problem = postdata.pg_dump_problem(src.info.server_version)
    checks.append(Check(problem is None, f"pg_dump: {problem or 'can dump the source'}"))
    if o.fence_roles:
        problems = fence.RoleFence(_writer_dsn(o, src, writer), o.fence_roles).check(writer)
        checks.append(Check(not problems, "fence roles: " + ("; ".join(problems) or
                            ", ".join(o.fence_roles) + " will be fenced out")))
    return checks


def _writer_dsn(o: Options, src: psycopg.Connection, writer: psycopg.Connection) -> str:
    return o.source if writer is src else o.primary


def _tables_check(src: psycopg.Connection, dst: psycopg.Connection) -> Check:
    """Every source table in the target, with the same columns, types and key."""
    problems, names = [], user_tables(src)
    for schema, name in names:
        ours, theirs = table_info(src, schema, name), table_info(dst, schema, name)
        if theirs is None:
            problems.append(f"{schema}.{name}: missing in the target")
            continue
        have = {c.name: c.type for c in theirs.columns}
        for c in ours.columns:
            if c.name not in have:
                problems.append(f"{schema}.{name}.{c.name}: missing in the target")
            elif have[c.name] != c.type:
                problems.append(f"{schema}.{name}.{c.name}: {c.type} in the source, "
                                f"{have[c.name]} in the target")
        extra = set(have) - {c.name for c in ours.columns}
        if extra:
            problems.append(f"{schema}.{name}: extra columns in the target: "
                            + ", ".join(sorted(extra)))
        if ours.key != theirs.key:
            problems.append(f"{schema}.{name}: primary key ({', '.join(ours.key)}) in the "
                            f"source, ({', '.join(theirs.key)}) in the target")
    return Check(not problems, f"tables: {len(names)} source tables in the target with "
                 "the same columns and key" if not problems else
                 "tables: " + "; ".join(problems))


def _transactions_check(o: Options, src: psycopg.Connection) -> Check:
    """No long-running or prepared transaction in the source."""
    long = src.execute(
        """select pid, usename, extract(epoch from now() - xact_start)::int
           from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()
             and backend_type = 'client backend' and xact_start < now() - make_interval(secs => %s)
           order by xact_start""", (o.max_transaction_seconds,)).fetchall()
    prepared = src.execute("select count(*) from pg_prepared_xacts "
                           "where database = current_database()").fetchone()[0]
    text = ", ".join(f"pid {pid} ({user}, {age}s)" for pid, user, age in long)
    return Check(not long and not prepared,
                 "transactions: none open longer than "
                 f"{o.max_transaction_seconds:.0f}s, none prepared"
                 if not long and not prepared else
                 "transactions: " + "; ".join(
                     ([f"open longer than {o.max_transaction_seconds:.0f}s: {text}"]
                      if long else [])
                     + ([f"{prepared} prepared (commit or roll them back)"]
                        if prepared else [])))


def _replica_sessions(dst: psycopg.Connection) -> list[int]:
    return [r[0] for r in dst.execute(
        "select pid from pg_stat_activity where datname = current_database()"
        " and application_name = %s", (REPLICA_APPLICATION_NAME,)).fetchall()]


def run(o: Options, say=print) -> Cutover:
    c = Cutover(o)
    step_at = time.monotonic()

    def step(name: str) -> None:
        nonlocal step_at
        now = time.monotonic()
        c.steps.append((name, now - step_at))
        step_at = now

    with connect(o.source, autocommit=True) as src, connect(o.target, autocommit=True) as dst, \
            _writer(o, src) as writer:
        try:
            c.preconditions = preconditions(o, src, dst, writer)
        except psycopg.Error as exc:
            raise BottlerError(f"checking the preconditions failed: {redact(str(exc).strip())}"
                               ) from None
        for check in c.preconditions:
            say(f"{'✓' if check.ok else '✗'} {check.what}")
        step("preconditions")
        if not all(ch.ok for ch in c.preconditions):
            c.verdict = NOT_READY if o.dry_run else NO_GO
            c.reasons.append("preconditions failed")
            return c
        if o.dry_run:
            c.verdict = READY
            return c
        roles = fence.RoleFence(_writer_dsn(o, src, writer), o.fence_roles)
        try:
            _fenced(c, o, src, dst, writer, roles, say, step)
        except fence.FenceTimeout as exc:
            c.verdict = NO_GO
            c.reasons.append(str(exc))
        finally:
            c.verdict_at = time.time()
            c.sessions_ended = roles.ended
            if c.verdict != GO and roles.saved:
                roles.restore()
                c.roles_restored = True
                say(f"roles {', '.join(o.fence_roles)}: connection limits restored")
        return c


@contextmanager
def _writer(o: Options, src: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """Where the fence is written: the source, or its primary when it is a standby (refused
    in one line without --primary, as the capture refuses it)."""
    primary = standby.primary_of(src, o.primary)
    if primary is None:
        yield src
        return
    with primary:
        yield primary


def _fenced(c: Cutover, o: Options, src, dst, writer, roles: fence.RoleFence, say,
            step) -> None:
    if o.fence_roles:
        roles.apply()
        c.roles_fenced = list(o.fence_roles)
        c.writes_stopped_at = time.time()
        say(f"fence: roles {', '.join(o.fence_roles)} fenced out of the source "
            f"({roles.ended} sessions ended)")
    topics = set(_table_topics(src, o.prefix)) | {with_prefix(o.prefix, TRUNCATE)}
    lsn = fence.emit(writer, "fence")
    c.fence_at, c.fence_lsn = time.time(), str(Lsn(lsn))
    say(f"fence: written at {c.fence_lsn}; waiting for the capture to confirm it")
    fence.wait_published(src, o.slot, lsn, o.fence_timeout)
    positions, starts = fence.end_positions(o.broker, topics)
    for (topic, partition), offset in sorted(positions.items()):
        c.positions.setdefault(topic, {})[partition] = offset
    say(f"fence: published; waiting for the replica to pass {len(positions)} topic "
        "partitions' end offsets")
    fence.wait_applied(o.target, o.group, positions, starts, o.fence_timeout)
    say("fence: the replica has applied everything before the fence")
    step("fence")

    say("verify: comparing every table at the fence")
    c.verify = verify(o.source, o.target, max_keys=o.max_keys)
    step("verify")
    for t in c.verify.tables:
        detail = "identical" if t.identical else "; ".join(
            t.problems + [f"{d.kind}: {d.key}" for d in t.differences]) or "differs"
        say(f"  {'✓' if t.identical else '✗'} {t.qualified}: {t.source_rows:,} rows, "
            f"{detail} ({t.seconds:.2f}s)")
    if not c.verify.identical:
        c.verdict = NO_GO
        c.reasons.append("verify: " + ", ".join(
            t.qualified for t in c.verify.tables if not t.identical) + " differ")
        return

    if _replica_sessions(dst):
        say("replica: still connected to the target; stop `bottler materialize postgres` "
            "now (it has applied everything up to the fence): identity columns, triggers "
            "and foreign keys would break its writes")
        fence.wait_until(lambda: not _replica_sessions(dst), o.replica_stop_timeout,
                         "the replica to stop",
                         "stop `bottler materialize postgres` and run the cutover again")
    say("replica: stopped")
    step("replica stopped")

    say("sequences, identity columns, defaults and CHECK constraints:")
    # the primary's sequences: a standby's read up to 32 values ahead (what the primary logged)
    c.definitions = definitions.carry(writer, dst, o.sequence_margin, progress=say)
    for s in c.definitions.sequences:
        say(f"  sequence {s.name} set to {s.value}" + ("" if s.is_called else " (unused)"))
    step("sequences")
    say("post-data (pg_dump --section=post-data):")
    c.postdata = postdata.apply(dst, postdata.dump(o.source, src.info.server_version), progress=say)
    step("post-data")
    if c.postdata.failed:
        c.verdict = NO_GO
        c.reasons.append("post-data: " + ", ".join(e.label for e in c.postdata.failed)
                         + " failed")
        return

    # The closing fence: nothing reached the topics after the first one.
    lsn = fence.emit(writer, "close")
    fence.wait_published(src, o.slot, lsn, o.fence_timeout)
    after, _ = fence.end_positions(o.broker, topics)
    grown = sorted(f"{t}[{p}] +{after[(t, p)] - n}" for (t, p), n in positions.items()
                   if after.get((t, p), n) > n)
    grown += sorted(f"{t}[{p}] (new)" for (t, p) in after.keys() - positions.keys()
                    if after[(t, p)] > starts.get((t, p), 0))
    step("closing fence")
    if grown:
        c.verdict = NO_GO
        c.reasons.append("the source was written to after the fence: " + ", ".join(grown)
                         + " (stop every writer, or pass --fence-roles)")
        return
    c.verdict = GO
