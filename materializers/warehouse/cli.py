"""`bottler materialize warehouse` and `bottler warehouse optimize|vacuum` (registered by
bottler/cli.py)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer
from pydantic import Field

from common import extras, options
from common.config import MetricsSettings, env
from common.errors import BottlerError
from common.flags import Flag
from common.options import settings_command
from common.signals import stop_on_signals

if TYPE_CHECKING:
    from materializers.core.ownership import OwnedTopics

log = logging.getLogger(__name__)

# The continuous job's trigger, per route: the spark route commits per table and trigger, and a
# Delta table wants few commits (each one a log entry and a file), so it waits longer.
INTERVALS = {"python": 1.0, "spark": 60.0}
# --max-messages' default, per route: the spark route's batch stays in the JVM (its cache
# spills to disk past memory), and a table's first load split over batches makes each batch
# after the first a MERGE into the rows before it (docs/warehouse.md, "The Kafka read")
MAX_MESSAGES = {"python": 1_000_000, "spark": 5_000_000}
RETENTION_HOURS = 24.0  # --retention-hours' default (upkeep.py)
# --driver-merge-below's default: a batch of fewer messages of a topic is merged on the driver,
# by delta-rs (spark_merge.py; docs/warehouse.md, "Small batches merged on the driver")
DRIVER_MERGE_BELOW = 100_000
warehouse_app = typer.Typer(no_args_is_help=True, help="Maintain the Delta warehouse tables.")


@warehouse_app.callback()
def _warehouse_extra(ctx: typer.Context) -> None:
    extras.require("warehouse", f"{ctx.command_path} {ctx.invoked_subcommand}")


PATH_ENV = "BOTTLER_WAREHOUSE_PATH"
PATH_FLAG = Flag("--path", help="The warehouse directory")
# optimize and vacuum take it as a plain typer option (typer reads its variable): no settings
PATH = typer.Option(..., *PATH_FLAG.names, envvar=PATH_ENV, show_envvar=True,
                    help=PATH_FLAG.help, show_default=False)


class WarehouseSettings(options.ViewSettings, MetricsSettings):
    path: Annotated[Path, PATH_FLAG] = Field(validation_alias=env(PATH_ENV))
    topics: Annotated[list[str], options.TOPICS] = []
    once: Annotated[bool, options.ONCE.but(
        help="Catch up to the current high watermarks, then exit.")] = False
    master: Annotated[str, Flag("--master", help="Spark master")] = Field(
        "local[2]", validation_alias=env("BOTTLER_SPARK_MASTER"))
    # Loopback unless asked: the driver's ports take unauthenticated connections.
    driver_host: Annotated[str, Flag(
        "--driver-host", help="Address the Spark driver listens on, for its executors "
        "(127.0.0.1: this machine only)")] = Field(
        "127.0.0.1", validation_alias=env("BOTTLER_SPARK_DRIVER_HOST"))
    max_messages: Annotated[int | None, Flag(  # None: MAX_MESSAGES[route]
        "--max-messages", help="Offsets per partition per micro-batch, at most",
        shown=f"{MAX_MESSAGES['python']:,}; {MAX_MESSAGES['spark']:,} with --route spark")
    ] = Field(None, ge=1)
    interval: Annotated[float | None, Flag(  # None: INTERVALS[route]
        "--interval", help="Seconds between micro-batches when idle",
        shown=f"{INTERVALS['python']:g}; {INTERVALS['spark']:g} with --route spark")] = Field(
        None, gt=0)
    route: Annotated[Literal["python", "spark"], Flag(
        "--route", help="python: today's job (Python workers decode, delta-rs merges); spark: "
        "Spark's Kafka source, from_avro and delta-spark's MERGE (docs/warehouse.md)")] = Field(
        "python", validation_alias=env("BOTTLER_WAREHOUSE_ROUTE"))
    spark_remote: Annotated[str | None, Flag(
        "--spark-remote", help="With --route spark: the Spark Connect server to run in "
        "(sc://host:port; `bottler warehouse serve`), a session that stays, instead of a JVM "
        "of this job's own")] = Field(None, validation_alias=env("BOTTLER_SPARK_REMOTE"))
    retention_hours: Annotated[float, Flag(
        "--retention-hours", help="With --route spark: hours the Delta tables keep the files "
        "and log entries of older versions, then VACUUM and Delta's log cleanup remove them "
        "(their delta.deletedFileRetentionDuration and delta.logRetentionDuration)")] = Field(
        RETENTION_HOURS, gt=0)
    driver_merge_below: Annotated[int, Flag(
        "--driver-merge-below", help="With --route spark: a table's batch of fewer messages is "
        "merged by delta-rs on the driver, its changes collected as Arrow, instead of by "
        "delta-spark's MERGE, a dozen Spark jobs (0: every batch by delta-spark)")] = Field(
        DRIVER_MERGE_BELOW, ge=0)


@settings_command
def materialize_warehouse(s: WarehouseSettings) -> None:
    """Merge the table topics into Delta Lake tables with PySpark."""
    from materializers.warehouse import jvm
    from materializers.warehouse.job import spark_session

    if s.spark_remote and s.route != "spark":
        raise BottlerError("--spark-remote serves the spark route only",
                           "add --route spark, or leave --spark-remote out")
    owned = prepare(s)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    started = time.monotonic()
    if s.spark_remote:
        from materializers.warehouse import connect

        with connect.remote_session(s.spark_remote) as spark:
            log.info("warehouse: a session of %s in %.1f s", s.spark_remote,
                     time.monotonic() - started)
            load(s, spark, owned)
        return
    try:
        spark = spark_session(s.master, driver_host=s.driver_host, route=s.route, once=s.once)
    except jvm.Stopped as stopped:
        log.info("warehouse %s", stopped)
        return
    log.info("warehouse: Spark started in %.1f s", time.monotonic() - started)
    try:
        load(s, spark, owned)
    finally:
        jvm.stop(spark)


def prepare(s: WarehouseSettings) -> OwnedTopics | None:
    """What is checked before Spark takes its seconds to start (the directory, the clients,
    the table paths); the metrics served. Returns the reader of the capture's topic ownership
    it made, for the job."""
    from materializers.warehouse.job import prefix_root
    from materializers.warehouse.preflight import check_table_paths

    _writable(s.path)
    s.check_clients()
    options.serve_metrics(s.metrics_port, s.metrics_host)
    # a table path that is not free for bottler's table: refused before Spark's start too
    return check_table_paths(prefix_root(s.path, s.topic_prefix), bootstrap=s.kafka,
                             registry=s.schema_registry, prefix=s.topic_prefix,
                             topics=s.topics or None)


def load(s: WarehouseSettings, spark: Any, owned: OwnedTopics | None) -> None:
    """The job of route ``s.route`` in the session ``spark``: ``--once``, or until SIGTERM or
    SIGINT. The session is the caller's to stop."""
    from materializers.warehouse.job import WarehouseJob, prefix_root

    common = dict(bootstrap=s.kafka, registry=s.schema_registry, prefix=s.topic_prefix,
                  topics=s.topics or None, on_poison=s.on_poison,
                  max_messages=s.max_messages or MAX_MESSAGES[s.route], owned=owned)
    if s.route == "spark":
        from materializers.warehouse.upkeep import KeptRoute

        job = KeptRoute(spark, prefix_root(s.path, s.topic_prefix),
                        retention_hours=s.retention_hours,
                        driver_merge_below=s.driver_merge_below, **common)
    else:
        job = WarehouseJob(spark, str(s.path), **common)
    try:
        if s.once:
            total = job.run_until_caught_up()
            typer.echo(f"warehouse load done: {total.changes} changes, "
                       f"{getattr(total, 'truncates', 0)} truncates, {total.dead_letters} dead "
                       f"letters into {s.path}")
            return
        stop = stop_on_signals()
        job.run(stop, s.interval or INTERVALS[s.route])
    finally:
        job.close()


@warehouse_app.command("serve")
def serve_command(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (the port is "
                             "unauthenticated: loopback unless the network is trusted)"),
    port: int = typer.Option(15002, "--port", help="Spark Connect port"),
    master: str = typer.Option("local[2]", "--master", envvar="BOTTLER_SPARK_MASTER",
                               help="Spark master"),
) -> None:
    """Serve the spark route's Spark session (its jars and settings) over Spark Connect until
    stopped: `materialize warehouse --route spark --spark-remote sc://HOST:PORT` runs in it,
    without a JVM start of its own."""
    from materializers.warehouse import connect, jvm

    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        connect.serve(host, port, master, stop_on_signals())
    except jvm.Stopped as stopped:
        log.info("warehouse server %s", stopped)


@warehouse_app.command("optimize")
def optimize_command(
    path: Path = PATH,
    tables: list[str] | None = typer.Option(None, "--table",
                                            help="schema.table to compact (repeatable) "
                                            "[default: every table]"),
    target_size: int | None = typer.Option(None, "--target-size",
                                           help="Target file size in bytes."),
) -> None:
    """Compact the tables' small files (one per micro-batch and table) into large ones."""
    from materializers.warehouse import maintenance

    _exists(path)
    for name, table in maintenance.tables(path, tables):
        metrics = maintenance.optimize(table, target_size)
        typer.echo(f"{name}: {metrics.get('numFilesRemoved', 0)} files compacted into "
                   f"{metrics.get('numFilesAdded', 0)}")


@warehouse_app.command("vacuum")
def vacuum_command(
    path: Path = PATH,
    tables: list[str] | None = typer.Option(None, "--table",
                                            help="schema.table to vacuum (repeatable) "
                                            "[default: every table]"),
    retention_hours: int = typer.Option(168, "--retention-hours",
                                        help="Keep the files of versions this recent."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List the files, delete nothing."),
) -> None:
    """Delete the data files no table version within the retention needs."""
    from materializers.warehouse import maintenance

    _exists(path)
    for name, table in maintenance.tables(path, tables):
        files = maintenance.vacuum(table, retention_hours, dry_run)
        typer.echo(f"{name}: {len(files)} files {'to delete' if dry_run else 'deleted'}")


def _writable(path: Path) -> None:
    """The warehouse directory exists (created if missing) and takes a file: checked before
    Spark's start, which takes seconds to minutes, rather than failing in its first write."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".bottler-write-check-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise BottlerError(
            f"the warehouse directory {path} is not writable: {exc.strerror or exc}",
            "give --path (BOTTLER_WAREHOUSE_PATH) a directory this user may write to",
        ) from None


def _exists(path: Path) -> None:
    if not path.is_dir():
        raise BottlerError(f"no warehouse at {path}",
                           "give the --path of a `bottler materialize warehouse` run")
