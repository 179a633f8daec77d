"""Follow and check a database migration through the target-Postgres replica.

See docs/migration.md for the cutover."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bottler.migrate.status import DEFAULT_GROUP, StatusReport
from bottler.migrate.verify import VerifyReport
from common.errors import BottlerError

migrate_app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)

out = Console() if sys.stdout.isatty() else Console(width=120)
err = Console(stderr=True, soft_wrap=True)

SourceOption = typer.Option(
    None, "--source", "-s", envvar="BOTTLER_PG_DSN", show_envvar=True, show_default=False,
    help="Source database DSN.")
TargetOption = typer.Option(
    None, "--target", "-t", envvar="BOTTLER_TARGET_DSN", show_envvar=True, show_default=False,
    help="Target (replica) database DSN.")
TablesOption = typer.Option(
    None, "--tables", help="Only this table (schema.table, or table in public); repeatable.")


def _required(value: str | None, flag: str, env: str) -> str:
    if not value:
        raise BottlerError(f"no {flag.lstrip('-')} database: pass {flag} DSN or set {env}")
    return value


def _tables(tables: list[str] | None) -> list[str] | None:
    # Accept both `--tables a --tables b` and `--tables a,b`.
    if not tables:
        return None
    return [t.strip() for item in tables for t in item.split(",") if t.strip()]


@migrate_app.command("verify")
def verify_cmd(
    source: str | None = SourceOption,
    target: str | None = TargetOption,
    tables: list[str] | None = TablesOption,
    max_keys: int = typer.Option(20, "--max-keys", min=0,
                                 help="List at most this many differing keys per table."),
    chunk_rows: int = typer.Option(100_000, "--chunk-rows", min=1,
                                   help="Rows per primary-key range compared at once."),
) -> None:
    """Compare source and target: row counts, checksums, differing keys.

    Exit 0 when every table is identical, 1 when anything differs, 2 on errors."""
    from bottler.migrate.verify import verify

    started = time.monotonic()
    report = verify(_required(source, "--source", "BOTTLER_PG_DSN"),
                    _required(target, "--target", "BOTTLER_TARGET_DSN"),
                    _tables(tables), max_keys=max_keys, chunk_rows=chunk_rows)
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
def status_cmd(
    source: str | None = SourceOption,
    target: str | None = TargetOption,
    broker: str = typer.Option("localhost:9092", "--broker", "-b", envvar="BOTTLER_KAFKA",
                               show_envvar=True, help="Kafka bootstrap servers."),
    prefix: str = typer.Option("", "--prefix", "-p", envvar="BOTTLER_TOPIC_PREFIX",
                               show_envvar=True, help="The capture's topic prefix."),
    group: str = typer.Option(DEFAULT_GROUP, "--group", "-g",
                              help="The replica's consumer group (its rows in bottler.offsets)."),
    tables: list[str] | None = TablesOption,
    exact: bool = typer.Option(False, "--exact",
                               help="Count rows exactly (count(*)) instead of estimating."),
) -> None:
    """Per table: row counts and the replica's lag in messages; caught up or not.

    The lag is the table topic's end offsets minus the offsets the replica stored with its data
    in bottler.offsets (for --group)."""
    from bottler.migrate.status import status

    report = status(_required(source, "--source", "BOTTLER_PG_DSN"),
                    _required(target, "--target", "BOTTLER_TARGET_DSN"),
                    broker, prefix, group, _tables(tables), exact)
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


@migrate_app.command("cutover")
def cutover_cmd(
    source: str | None = SourceOption,
    target: str | None = TargetOption,
    broker: str = typer.Option("localhost:9092", "--broker", "-b", envvar="BOTTLER_KAFKA",
                               show_envvar=True, help="Kafka bootstrap servers."),
    prefix: str = typer.Option("", "--prefix", "-p", envvar="BOTTLER_TOPIC_PREFIX",
                               show_envvar=True, help="The capture's topic prefix."),
    group: str = typer.Option(DEFAULT_GROUP, "--group", "-g",
                              help="The replica's consumer group (its rows in bottler.offsets)."),
    slot: str = typer.Option("bottler", "--slot", envvar="BOTTLER_SLOT", show_envvar=True,
                             help="The capture's replication slot."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check the preconditions only."),
    report: Path | None = typer.Option(
        None, "--report", help="Write the report here (Markdown) and beside it as .json."),
    sequence_margin: int = typer.Option(
        0, "--sequence-margin", min=0, help="Set each sequence this far past the source's."),
    fence_roles: list[str] | None = typer.Option(
        None, "--fence-roles", help="Roles whose sessions on the source are ended and whose "
        "connection limit is set to 0 for the cutover (restored on no-go); comma-separated."),
    max_lag: int = typer.Option(1000, "--max-lag", min=0,
                                help="Messages the replica may be behind before the fence."),
    fence_timeout: float = typer.Option(
        300, "--fence-timeout", min=1, help="Seconds to wait for the capture and the replica "
        "to pass the fence."),
    replica_timeout: float = typer.Option(
        300, "--replica-timeout", min=0,
        help="Seconds to wait for the replica to stop before the schema changes."),
    max_keys: int = typer.Option(20, "--max-keys", min=0,
                                 help="List at most this many differing keys per table."),
) -> None:
    """From "writes stopped" to "go" or "no-go": preconditions, fence, verify, sequences,
    post-data, report (docs/migration.md).

    Exit 0 on go (or a dry run whose preconditions pass), 1 on no-go, 2 on errors."""
    from bottler.migrate import cutover, cutover_report

    options = cutover.Options(
        _required(source, "--source", "BOTTLER_PG_DSN"),
        _required(target, "--target", "BOTTLER_TARGET_DSN"),
        broker, prefix, group, slot, dry_run, sequence_margin, _tables(fence_roles) or [],
        max_lag=max_lag, fence_timeout=fence_timeout, replica_stop_timeout=replica_timeout,
        max_keys=max_keys)
    result = cutover.run(options, say=lambda line: out.print(line, highlight=False,
                                                             markup=False))
    if result.downtime is not None:
        out.print(f"write downtime (fence to go): {result.downtime:.1f}s", highlight=False)
    if report is not None:
        written = cutover_report.write(result, report)
        out.print("report: " + ", ".join(str(p) for p in written), highlight=False)
    good = result.verdict in (cutover.GO, cutover.READY)
    reasons = f": {'; '.join(result.reasons)}" if result.reasons else ""
    out.print(f"[{'green' if good else 'bold red'}]verdict: {result.verdict}[/]"
              + reasons.replace("[", "\\["), highlight=False)
    raise typer.Exit(0 if good else 1)
