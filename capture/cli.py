"""`bottler capture` (Bottled Water's flags, long and short) and `bottler slot status|drop`."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from common.errors import BottlerError
from common.signals import stop_on_signals

slot_app = typer.Typer(no_args_is_help=True, help="Replication slots of the source database.")
out = Console()

DsnOption = typer.Option(None, "--postgres", "-d", help="Source database DSN "
                         "[env: BOTTLER_PG_DSN]", show_default=False)


def _props(pairs: list[str] | None, flag: str) -> dict[str, str]:
    props = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            secret = any(w in pair.lower() for w in ("password", "secret", "token"))
            raise BottlerError(
                f"{flag} expects prop=value, got {'***' if secret else pair!r}",
                f"write each setting as {flag} prop=value, e.g. {flag} compression.type=zstd",
            )
        props[name.strip()] = value.strip()
    return props


def capture(
    postgres: str | None = DsnOption,
    slot: str | None = typer.Option(None, "--slot", "-s", help="Replication slot name "
                                    "[default: bottler]", show_default=False),
    broker: str | None = typer.Option(None, "--broker", "-b", help="Kafka bootstrap servers "
                                      "[env: BOTTLER_KAFKA]", show_default=False),
    schema_registry: str | None = typer.Option(
        None, "--schema-registry", "-r", help="Schema registry URL [env: BOTTLER_REGISTRY]",
        show_default=False),
    output_format: str | None = typer.Option(None, "--output-format", "-f",
                                             help="avro (default) or json"),
    allow_unkeyed: bool = typer.Option(False, "--allow-unkeyed", "-u",
                                       help="Publish tables without a key (no deletes)."),
    topic_prefix: str | None = typer.Option(None, "--topic-prefix", "-p",
                                            help="Prefix of every topic name."),
    on_error: str | None = typer.Option(None, "--on-error", "-e",
                                        help="exit (default) or log: what a bad row does"),
    skip_snapshot: bool = typer.Option(False, "--skip-snapshot", "-x",
                                       help="Stream only new changes (new slot only)."),
    kafka_config: list[str] | None = typer.Option(None, "--kafka-config", "-C",
                                                  help="librdkafka setting prop=val"),
    topic_config: list[str] | None = typer.Option(None, "--topic-config", "-T",
                                                  help="topic setting prop=val"),
    tables: list[str] | None = typer.Option(None, "--tables", help="Tables to publish "
                                            "(schema.table, repeatable or comma-separated)"),
    publication: str | None = typer.Option(None, "--publication",
                                           help="Use this existing publication."),
    snapshot_workers: int | None = typer.Option(None, "--snapshot-workers",
                                                help="Parallel snapshot processes [default: 2]"),
    snapshot_chunk_pages: int | None = typer.Option(
        None, "--snapshot-chunk-pages",
        help="Pages (8 kB) per snapshot chunk: the unit a restarted snapshot resumes from "
             "[default: 2000]"),
    metrics_port: int | None = typer.Option(None, "--metrics-port",
                                            help="Serve Prometheus metrics on this port."),
    metrics_host: str | None = typer.Option(
        None, "--metrics-host", help="Address the metrics are served on (0.0.0.0: every "
        "interface) [default: 127.0.0.1] [env: BOTTLER_METRICS_HOST]", show_default=False),
    heartbeat_interval: float | None = typer.Option(None, "--heartbeat-interval",
                                                    help="Seconds between heartbeats [10]"),
    confirm_delay: float | None = typer.Option(
        None, "--confirm-delay",
        help="Seconds an acknowledged position waits before it is confirmed to PostgreSQL [0]"),
    transaction_topic: bool = typer.Option(False, "--transaction-topic",
                                           help="Publish transaction boundaries."),
    replica_identity_full: bool = typer.Option(
        False, "--replica-identity-full",
        help="Set REPLICA IDENTITY FULL on tables with TOASTable columns."),
    temporal_mode: str | None = typer.Option(
        None, "--temporal-mode",
        help="logical (default: Avro date/time logical types) or plain (ints with connect.name "
             "annotations, which every Python consumer reads)"),
    partitions: int | None = typer.Option(
        None, "--partitions",
        help="Partitions of each new table topic (keyed by murmur2: a row's events stay in one);"
             " per table with table_partitions in --config [default: 1]"),
    config: Path | None = typer.Option(None, "--config", help="YAML file of these settings."),
) -> None:
    """Snapshot the source database, then stream its changes into Kafka, one topic per table."""
    from capture.run import run_capture
    from capture.settings import load_settings

    names = [t.strip() for group in tables or [] for t in group.split(",") if t.strip()]
    settings = load_settings(
        postgres=postgres, slot=slot, broker=broker, schema_registry=schema_registry,
        output_format=output_format, allow_unkeyed=allow_unkeyed or None,
        topic_prefix=topic_prefix, on_error=on_error, skip_snapshot=skip_snapshot or None,
        kafka_config=_props(kafka_config, "-C"), topic_config=_props(topic_config, "-T"),
        tables=names, publication=publication, snapshot_workers=snapshot_workers,
        snapshot_chunk_pages=snapshot_chunk_pages,
        metrics_port=metrics_port, metrics_host=metrics_host,
        heartbeat_interval=heartbeat_interval,
        confirm_delay=confirm_delay,
        transaction_topic=transaction_topic or None,
        replica_identity_full=replica_identity_full or None, temporal_mode=temporal_mode,
        partitions=partitions, config_file=config,
    )
    stop = stop_on_signals()
    run_capture(settings, stop)


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
    from capture.slot import slot_status

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
    from capture.slot import drop_slot

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
