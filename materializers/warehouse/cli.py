"""`bottler materialize warehouse` and `bottler warehouse optimize|vacuum` (registered by
bottler/cli.py)."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Literal

import typer
from pydantic import Field

from common import options
from common.config import MetricsSettings, env, load
from common.errors import BottlerError
from common.options import option
from common.signals import stop_on_signals

log = logging.getLogger(__name__)

# The continuous job's trigger, per route: the spark route commits per table and trigger, and a
# Delta table wants few commits (each one a log entry and a file), so it waits longer.
INTERVALS = {"python": 1.0, "spark": 10.0}
warehouse_app = typer.Typer(no_args_is_help=True, help="Maintain the Delta warehouse tables.")

PATH = typer.Option(..., "--path", envvar="BOTTLER_WAREHOUSE_PATH",
                    help="The warehouse directory [env: BOTTLER_WAREHOUSE_PATH]",
                    show_default=False)


class WarehouseSettings(options.ViewSettings, MetricsSettings):
    path: Path = Field(validation_alias=env("BOTTLER_WAREHOUSE_PATH"))
    topics: list[str] = []
    once: bool = False
    master: str = Field("local[2]", validation_alias=env("BOTTLER_SPARK_MASTER"))
    # Loopback unless asked: the driver's ports take unauthenticated connections.
    driver_host: str = Field("127.0.0.1", validation_alias=env("BOTTLER_SPARK_DRIVER_HOST"))
    max_messages: int = Field(1_000_000, ge=1)
    interval: float | None = Field(None, gt=0)  # default: INTERVALS[route]
    route: Literal["python", "spark"] = Field("python",
                                              validation_alias=env("BOTTLER_WAREHOUSE_ROUTE"))


def materialize_warehouse(
    path: Path | None = option("--path", help="The warehouse directory "
                               "[env: BOTTLER_WAREHOUSE_PATH]"),
    broker: str | None = options.Broker,
    kafka_config: list[str] | None = options.KafkaConfig,
    schema_registry: str | None = options.SchemaRegistry,
    registry_config: list[str] | None = options.RegistryConfig,
    topic_prefix: str | None = options.TopicPrefix,
    topics: list[str] | None = options.Topics,
    on_poison: str | None = options.on_poison(),
    once: bool = options.once("Catch up to the current high watermarks, then exit."),
    master: str | None = option("--master", help="Spark master [default: local[2]] "
                                "[env: BOTTLER_SPARK_MASTER]"),
    driver_host: str | None = option("--driver-host", help="Address the Spark driver listens "
                                     "on, for its executors [default: 127.0.0.1: this machine "
                                     "only] [env: BOTTLER_SPARK_DRIVER_HOST]"),
    max_messages: int | None = option("--max-messages", help="Offsets per partition per "
                                      "micro-batch, at most [default: 1000000]"),
    interval: float | None = option("--interval", help="Seconds between micro-batches when "
                                    "idle [default: 1; 10 with --route spark]"),
    route: str | None = option("--route", help="python: today's job (Python workers decode, "
                               "delta-rs merges); spark: Spark's Kafka source, from_avro and "
                               "delta-spark's MERGE (docs/warehouse.md) [default: python] "
                               "[env: BOTTLER_WAREHOUSE_ROUTE]"),
    metrics_port: int | None = options.MetricsPort,
    metrics_host: str | None = options.MetricsHost,
    config: Path | None = options.Config,
) -> None:
    """Merge the table topics into Delta Lake tables with PySpark."""
    s = load(WarehouseSettings, locals())
    from materializers.warehouse import jvm
    from materializers.warehouse.job import WarehouseJob, spark_session

    path = s.path
    _writable(path)  # before Spark takes its seconds to start
    s.check_clients()
    options.serve_metrics(s.metrics_port, s.metrics_host)

    logging.getLogger("py4j").setLevel(logging.WARNING)
    started = time.monotonic()
    try:
        spark = spark_session(s.master, driver_host=s.driver_host, route=s.route)
    except jvm.Stopped as stopped:
        log.info("warehouse %s", stopped)
        return
    log.info("warehouse: Spark started in %.1f s", time.monotonic() - started)
    if s.route == "spark":
        from materializers.warehouse.job import prefix_root
        from materializers.warehouse.native import SparkRoute

        job = SparkRoute(spark, prefix_root(path, s.topic_prefix), bootstrap=s.kafka,
                         registry=s.schema_registry, prefix=s.topic_prefix,
                         topics=s.topics or None, on_poison=s.on_poison,
                         max_messages=s.max_messages)
    else:
        job = WarehouseJob(spark, str(path), bootstrap=s.kafka, registry=s.schema_registry,
                           prefix=s.topic_prefix, topics=s.topics or None,
                           on_poison=s.on_poison, max_messages=s.max_messages)
    try:
        if s.once:
            total = job.run_until_caught_up()
            typer.echo(f"warehouse load done: {total.changes} changes, "
                       f"{getattr(total, 'truncates', 0)} truncates, {total.dead_letters} dead "
                       f"letters into {path}")
            return
        stop = stop_on_signals()
        job.run(stop, s.interval or INTERVALS[s.route])
    finally:
        job.close()
        jvm.stop(spark)


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
