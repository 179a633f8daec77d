"""Follow and check a database migration through the target-Postgres replica.

See docs/migration.md for the cutover."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from pydantic import Field, field_validator
from rich.console import Console
from rich.table import Table
from rich.text import Text

from common.config import (
    TOPIC_PREFIX,
    KafkaSettings,
    Settings,
    TopicPrefixSettings,
    comma_separated,
    env,
)
from common.flags import Flag
from common.options import settings_command
from materializers.postgres import DEFAULT_GROUP

if TYPE_CHECKING:
    from bottler.migrate.status import StatusReport
    from bottler.migrate.verify import VerifyReport

migrate_app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)

out = Console() if sys.stdout.isatty() else Console(width=120)
err = Console(stderr=True, soft_wrap=True)

# (the migrate commands spell the prefix and the group their own way too)
PREFIX = TOPIC_PREFIX.but("--topic-prefix", "--prefix", "-p", help="The capture's topic prefix")
GROUP = Flag("--group-id", "--group", "-g",
             help="The replica's consumer group (its rows in bottler.offsets)")


class MigrateSettings(Settings):
    """What every `bottler migrate` command reads: the two databases, the tables."""

    source: Annotated[str, Flag("--source", "-s", help="Source database DSN")] = Field(
        validation_alias=env("BOTTLER_PG_DSN"))
    target: Annotated[str, Flag("--target", "-t", help="Target (replica) database DSN")] = Field(
        validation_alias=env("BOTTLER_TARGET_DSN"))
    tables: Annotated[list[str], Flag(
        "--tables", help="Only this table (schema.table, or table in public); repeatable.",
        shown="every user table")] = []

    @field_validator("tables", mode="before")
    @classmethod
    def _tables(cls, value):
        return comma_separated(value)


MAX_KEYS = Flag("--max-keys", help="List at most this many differing keys per table")


class VerifySettings(MigrateSettings):
    max_keys: Annotated[int, MAX_KEYS] = Field(20, ge=0)
    chunk_rows: Annotated[int, Flag(
        "--chunk-rows", help="Rows per primary-key range compared at once")] = Field(100_000, ge=1)


class MigrateStatusSettings(MigrateSettings, KafkaSettings, TopicPrefixSettings):
    topic_prefix: Annotated[str, PREFIX] = ""
    group_id: Annotated[str, GROUP] = DEFAULT_GROUP
    exact: Annotated[bool, Flag(
        "--exact", help="Count rows exactly (count(*)) instead of estimating.")] = False


@migrate_app.command("verify")
@settings_command
def verify_cmd(s: VerifySettings) -> None:
    """Compare source and target: row counts, checksums, differing keys.

    Exit 0 when every table is identical, 1 when anything differs, 2 on errors."""
    from bottler.migrate.verify import verify

    started = time.monotonic()
    report = verify(s.source, s.target, s.tables or None, max_keys=s.max_keys,
                    chunk_rows=s.chunk_rows)
    print_verify(report, time.monotonic() - started)
    raise typer.Exit(0 if report.identical else 1)


def print_verify(report: VerifyReport, seconds: float) -> None:
    table = Table(title="migrate verify: source against target", title_justify="left")
    for col in ("", "table", "source rows", "target rows", "checksum (source / target)",
                "differences", "time"):
        table.add_column(col, justify="right" if "rows" in col or col == "time" else "left")
    for r in report.tables:
        mark = Text("✓", style="green") if r.identical else Text("✗", style="bold red")
        if not r.exists_in_target:
            detail = "missing in target"
            checksum = "-"
        else:
            lines = list(r.problems)
            counts = ", ".join(f"{n:,} {kind}" for kind, n in sorted(r.difference_counts.items()))
            if counts:
                lines.append(counts)
            lines += [f"{d.kind}: {d.key}" for d in r.differences]
            shown = len(r.differences)
            total = sum(r.difference_counts.values())
            if total > shown:
                lines.append(f"… {total - shown} more")
            lines += [f"note: {n}" for n in r.notes]
            detail = "\n".join(lines) or "identical"
            checksum = r.source_checksum[:10] + (
                "" if r.source_checksum == r.target_checksum else f" / {r.target_checksum[:10]}")
        table.add_row(mark, r.qualified, f"{r.source_rows:,}",
                      "-" if r.target_rows is None else f"{r.target_rows:,}",
                      checksum, detail, f"{r.seconds:.2f}s")
    out.print(table)
    if report.target_only:
        out.print("tables only in the target (not compared): " + ", ".join(report.target_only))
    if report.sequences_behind:
        out.print(f"note: {len(report.sequences_behind)} sequences of the target are behind the "
                  "source's (the replica does not carry sequence values; `bottler migrate "
                  "cutover` sets them): " + ", ".join(
                      f"{name} {src} > {'missing' if dst is None else dst}"
                      for name, (src, dst) in sorted(report.sequences_behind.items())),
                  highlight=False)
    differing = [r.qualified for r in report.tables if not r.identical]
    if differing:
        out.print(f"[bold red]✗ {len(differing)} of {len(report.tables)} tables differ:[/] "
                  + ", ".join(differing) + f" ({seconds:.1f}s)", highlight=False)
    else:
        out.print(f"[green]✓ all {len(report.tables)} tables identical[/] ({seconds:.1f}s)",
                  highlight=False)


@migrate_app.command("status")
@settings_command
def status_cmd(s: MigrateStatusSettings) -> None:
    """Per table: row counts and the replica's lag in messages; caught up or not.

    The lag is the table topic's end offsets minus the offsets the replica stored with its data
    in bottler.offsets (for --group)."""
    from bottler.migrate.status import status

    s.check_clients()
    report = status(s.source, s.target, s.kafka, s.topic_prefix, s.group_id, s.tables or None,
                    s.exact)
    print_status(report)


def _rows(n: int | None, exact: bool) -> str:
    if n is None:
        return "-"
    return f"{n:,}" if exact else f"~{n:,}"


def _offsets(offsets: dict[int, int]) -> str:
    if not offsets:
        return "-"
    if len(offsets) == 1:
        return str(next(iter(offsets.values())))
    return f"{sum(offsets.values())} ({len(offsets)} partitions)"


def print_status(report: StatusReport) -> None:
    table = Table(title=f"migrate status (replica group {report.group})", title_justify="left")
    for col in ("table", "topic", "source rows", "target rows", "end offsets",
                "replica offsets", "lag"):
        table.add_column(col, justify="left" if col in ("table", "topic") else "right")
    for t in [*report.tables, *report.other_topics]:
        if not t.topic_exists:
            lag = Text("no topic", style="yellow")
        else:
            lag = Text(f"{t.lag:,}", style="green" if t.lag == 0 else "yellow")
        table.add_row(t.qualified if t.table else "(control)", t.topic,
                      _rows(t.source_rows, t.source_exact) if t.table else "",
                      _rows(t.target_rows, t.target_exact) if t.table else "",
                      _offsets(t.end_offsets), _offsets(t.stored_offsets), lag)
    out.print(table)
    if not report.offsets_table:
        out.print("[yellow]the target has no bottler.offsets table: the replica has not "
                  "written anything yet[/]", highlight=False)
    verdict = "[green]yes[/]" if report.caught_up else "[yellow]no[/]"
    out.print(f"total lag: {report.lag:,} messages; caught up: {verdict}", highlight=False)


class CutoverSettings(MigrateSettings, KafkaSettings, TopicPrefixSettings):
    tables: list[str] = []  # a key only, no flag: the cutover takes every table
    topic_prefix: Annotated[str, PREFIX] = ""
    group_id: Annotated[str, GROUP] = DEFAULT_GROUP
    slot: Annotated[str, Flag("--slot", help="The capture's replication slot")] = "bottler"
    # A capture on a hot standby: the standby is --source (its slot), the fence goes to the
    # primary, named as the capture names it
    primary: Annotated[str | None, Flag(
        "--primary", help="The primary's DSN (same database) when --source is the hot standby "
        "the capture decodes on: the fence is written there")] = None
    dry_run: Annotated[bool, Flag("--dry-run", help="Check the preconditions only.")] = False
    report: Annotated[Path | None, Flag(
        "--report", help="Write the report here (Markdown) and beside it as .json.")] = None
    sequence_margin: Annotated[int, Flag(
        "--sequence-margin", help="Set each sequence this far past the source's")] = Field(
        0, ge=0)
    fence_roles: Annotated[list[str], Flag(
        "--fence-roles", help="Roles whose sessions on the source are ended and whose "
        "connection limit is set to 0 for the cutover (restored on no-go); comma-separated.",
    )] = []
    max_lag: Annotated[int, Flag(
        "--max-lag", help="Messages the replica may be behind before the fence")] = Field(
        1000, ge=0)
    fence_timeout: Annotated[float, Flag(
        "--fence-timeout",
        help="Seconds to wait for the capture and the replica to pass the fence")] = Field(
        300.0, ge=1)
    replica_timeout: Annotated[float, Flag(
        "--replica-timeout",
        help="Seconds to wait for the replica to stop before the schema changes")] = Field(
        300.0, ge=0)
    max_keys: Annotated[int, MAX_KEYS] = Field(20, ge=0)

    @field_validator("fence_roles", mode="before")
    @classmethod
    def _roles(cls, value):
        return comma_separated(value)


@migrate_app.command("cutover")
@settings_command
def cutover_cmd(s: CutoverSettings) -> None:
    """From "writes stopped" to "go" or "no-go": preconditions, fence, verify, sequences,
    post-data, report (docs/migration.md).

    Exit 0 on go (or a dry run whose preconditions pass), 1 on no-go, 2 on errors."""
    from bottler.migrate import cutover, cutover_report

    s.check_clients()
    plan = cutover.Options(
        s.source, s.target, s.kafka, s.topic_prefix, s.group_id, s.slot, s.dry_run,
        s.sequence_margin, s.fence_roles, max_lag=s.max_lag, fence_timeout=s.fence_timeout,
        replica_stop_timeout=s.replica_timeout, max_keys=s.max_keys, primary=s.primary)
    result = cutover.run(plan, say=lambda line: out.print(line, highlight=False, markup=False))
    if result.downtime is not None:
        out.print(f"write downtime (fence to go): {result.downtime:.1f}s", highlight=False)
    if s.report is not None:
        written = cutover_report.write(result, s.report)
        out.print("report: " + ", ".join(str(p) for p in written), highlight=False)
    good = result.verdict in (cutover.GO, cutover.READY)
    reasons = f": {'; '.join(result.reasons)}" if result.reasons else ""
    out.print(f"[{'green' if good else 'bold red'}]verdict: {result.verdict}[/]"
              + reasons.replace("[", "\\["), highlight=False)
    raise typer.Exit(0 if good else 1)
