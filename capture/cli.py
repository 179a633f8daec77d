"""`bottler capture` (Bottled Water's flags, long and short), `bottler capture snapshot` and
`bottler slot status|drop`."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from capture.settings import load_settings
from common import options
from common.errors import BottlerError
from common.options import option
from common.signals import stop_on_signals

slot_app = typer.Typer(no_args_is_help=True, help="Replication slots of the source database.")
# `bottler capture` runs the capture; `bottler capture snapshot` asks a running one for a table.
capture_app = typer.Typer(invoke_without_command=True)
out = Console()

DsnOption = typer.Option(None, "--postgres", "-d", help="Source database DSN "
                         "[env: BOTTLER_PG_DSN]", show_default=False)


@capture_app.callback(invoke_without_command=True)
def capture(
    ctx: typer.Context,
    postgres: str | None = DsnOption,
    slot: str | None = option("--slot", "-s", help="Replication slot name [default: bottler]"),
    broker: str | None = options.Broker,
    kafka_config: list[str] | None = options.KafkaConfig,
    schema_registry: str | None = options.SchemaRegistry,
    registry_config: list[str] | None = options.RegistryConfig,
    output_format: str | None = option("--output-format", "-f", help="avro (default) or json"),
    allow_unkeyed: bool = option("--allow-unkeyed", "-u", default=False,
                                 help="Publish tables without a key (no deletes)."),
    topic_prefix: str | None = option("--topic-prefix", "-p", help="Prefix of every topic name "
                                      "[env: BOTTLER_TOPIC_PREFIX]"),
    on_error: str | None = option("--on-error", "-e",
                                  help="dead-letter (default), exit or log: what a row "
                                  "that cannot be published does"),
    skip_snapshot: bool = option("--skip-snapshot", "-x", default=False,
                                 help="Stream only new changes (new slot only)."),
    topic_config: list[str] | None = option("--topic-config", "-T", metavar="PROP=VALUE",
                                            help="topic setting prop=val"),
    tables: list[str] | None = option("--tables", help="Tables to publish "
                                      "(schema.table, repeatable or comma-separated)"),
    publication: str | None = option("--publication", help="Use this existing publication."),
    snapshot_workers: int | None = option("--snapshot-workers",
                                          help="Parallel snapshot processes [default: 2]"),
    snapshot_chunk_pages: int | None = option(
        "--snapshot-chunk-pages",
        help="Pages (8 kB) per snapshot chunk, the unit workers share; a restart resumes a "
             "chunk after its last acknowledged quarter [default: 2000]"),
    incremental_chunk_rows: int | None = option(
        "--incremental-chunk-rows",
        help="Rows per chunk of an incremental snapshot [default: 10000]"),
    metrics_port: int | None = options.MetricsPort,
    metrics_host: str | None = options.MetricsHost,
    heartbeat_interval: float | None = option("--heartbeat-interval",
                                              help="Seconds between heartbeats [10]"),
    transaction_topic: bool = option("--transaction-topic", default=False,
                                     help="Publish transaction boundaries."),
    stream_large_transactions: bool = option(
        "--stream-large-transactions", default=False,
        help="Have PostgreSQL (14+) stream a transaction larger than logical_decoding_work_mem "
             "while it runs (pgoutput protocol 2+), staged on local disk until it commits, "
             "instead of spilling it to the source's disk."),
    stream_spool_dir: Path | None = option(
        "--stream-spool-dir",
        help="Where streamed transactions wait for their commit [default: "
             "<temp dir>/bottler-stream-<system id>-<slot>]"),
    replica_identity_full: bool = option(
        "--replica-identity-full", default=False,
        help="Set REPLICA IDENTITY FULL on tables with TOASTable columns."),
    temporal_mode: str | None = option(
        "--temporal-mode",
        help="logical (default: Avro date/time logical types) or plain (ints with connect.name "
             "annotations, which every Python consumer reads)"),
    slot_warn_retained_mb: int | None = option(
        "--slot-warn-retained-mb",
        help="Warn when the slot makes the source keep this much WAL (MiB) [10240]"),
    slot_warn_safe_mb: int | None = option(
        "--slot-warn-safe-mb",
        help="Warn when the slot's safe_wal_size falls under this (MiB) [2048]"),
    recover_lost_slot: bool = option(
        "--recover-lost-slot", default=False,
        help="If the slot was invalidated (wal_status lost): reset the topics, new slot, "
        "snapshot."),
    partitions: int | None = option(
        "--partitions",
        help="Partitions of each new table topic (keyed by murmur2: a row's events stay in one);"
             " per table with table_partitions in --config [default: 1]"),
    config_file: Path | None = options.Config,
) -> None:
    """Snapshot the source database, then stream its changes into Kafka, one topic per table."""
    given = {k: v for k, v in locals().items() if k != "ctx"}  # the flags, before anything else
    if ctx.invoked_subcommand:
        return
    from capture.run import run_capture

    settings = load_settings(**given)
    stop = stop_on_signals()
    run_capture(settings, stop)


@capture_app.command("snapshot")
def snapshot_cmd(
    tables: list[str] = typer.Argument(..., help="Tables to re-publish (schema.table; public. "
                                       "may be omitted)", show_default=False),
    postgres: str | None = DsnOption,
    slot: str = typer.Option("bottler", "--slot", "-s", envvar="BOTTLER_SLOT",
                             help="The capture's replication slot."),
) -> None:
    """Ask the capture of SLOT to re-publish tables, in chunks, while it streams."""
    from capture.snapshot.request import request_snapshot

    for table in tables:
        lsn, qualified = request_snapshot(_dsn(postgres), slot, table)
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
    slot: str = typer.Option("bottler", "--slot", "-s", help="The slot to drop."),
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
