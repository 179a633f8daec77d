"""`bottler capture` (Bottled Water's flags, long and short), `bottler capture snapshot` and
`bottler slot status|drop`."""

from __future__ import annotations

import os

import typer
from rich.console import Console
from rich.table import Table

from capture.settings import CaptureSettings
from common.errors import BottlerError
from common.options import settings_command
from common.signals import stop_on_signals

slot_app = typer.Typer(no_args_is_help=True, help="Replication slots of the source database.")
# `bottler capture` runs the capture; `bottler capture snapshot` asks a running one for a table.
capture_app = typer.Typer(invoke_without_command=True)
out = Console()

SLOT = CaptureSettings.model_fields["slot"].default  # the capture's default slot
DsnOption = typer.Option(None, "--postgres", "-d", help="Source database DSN "
                         r"\[env: BOTTLER_PG_DSN]", show_default=False)


@capture_app.callback(invoke_without_command=True)
@settings_command
def capture(ctx: typer.Context, settings: CaptureSettings) -> None:
    """Snapshot the source database, then stream its changes into Kafka, one topic per table."""
    if ctx.invoked_subcommand:
        return
    from capture.run import run_capture

    stop = stop_on_signals()
    run_capture(settings, stop)


@capture_app.command("snapshot")
def snapshot_cmd(
    tables: list[str] = typer.Argument(..., help="Tables to re-publish (schema.table; public. "
                                       "may be omitted)", show_default=False),
    postgres: str | None = DsnOption,
    slot: str = typer.Option(SLOT, "--slot", "-s", envvar="BOTTLER_SLOT",
                             help="The capture's replication slot."),
    primary: str | None = typer.Option(
        None, "--primary", envvar="BOTTLER_PRIMARY", show_default=False,
        help="The primary's DSN, when --postgres is the standby the capture decodes on: the "
        "request is written there"),
) -> None:
    """Ask the capture of SLOT to re-publish tables, in chunks, while it streams."""
    from capture.snapshot.request import request_snapshot

    for table in tables:
        lsn, qualified = request_snapshot(_dsn(postgres), slot, table, primary)
        out.print(f"requested an incremental snapshot of {qualified} from the capture of slot "
                  f"{slot} (at WAL position {lsn}); it starts as soon as the capture streams "
                  "past that position (its log says when it completes)")


def _dsn(postgres: str | None) -> str:
    dsn = postgres or os.environ.get("BOTTLER_PG_DSN")
    if not dsn:
        raise BottlerError("no source database: pass --postgres DSN or set BOTTLER_PG_DSN")
    return dsn


@slot_app.command("status")
def slot_status_cmd(
    postgres: str | None = DsnOption,
    slot: str | None = typer.Option(None, "--slot", "-s", help="Only this slot."),
) -> None:
    """Each logical slot: confirmed LSN, retained WAL, lag, and whether a capture holds it."""
    from capture.source.slot import slot_status

    rows = slot_status(_dsn(postgres), slot)
    if slot and not rows:
        raise BottlerError(f"replication slot {slot} does not exist",
                           "`bottler slot status` without --slot lists every slot")
    table = Table(title="logical replication slots", title_justify="left")
    for col in ("slot", "active pid", "confirmed LSN", "retained WAL", "lag", "WAL status"):
        table.add_column(col)
    for r in rows:
        table.add_row(r.name, str(r.active_pid or "-"), r.confirmed_lsn or "-",
                      _bytes(r.retained_wal_bytes), _bytes(r.lag_bytes), r.wal_status or "-")
    out.print(table)


@slot_app.command("drop")
def slot_drop_cmd(
    postgres: str | None = DsnOption,
    slot: str = typer.Option(SLOT, "--slot", "-s", help="The slot to drop."),
) -> None:
    """Drop a slot, so the server stops retaining WAL for it."""
    from capture.source.slot import drop_slot

    drop_slot(_dsn(postgres), slot)
    out.print(f"dropped replication slot {slot}")


def _bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"
