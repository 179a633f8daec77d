"""The warehouse's spark route as a Spark application, run as a Spark user runs their jobs:

    spark-submit --master spark://host:7077 --packages <the pins> \\
        $(python -c 'import materializers.warehouse.submit as m; print(m.__file__)') \\
        --config bottler.yaml [--once]

The job is that of ``bottler materialize warehouse --route spark`` (native.py, with its
housekeeping, upkeep.py), read from the same settings (flags, ``BOTTLER_*`` variables, the YAML
file). The session is spark-submit's: its master, jars or packages, driver and executor settings
are taken as given (the settings' ``master`` and ``driver_host`` are not used); the route's own
SQL settings (job.SPARK_ROUTE_CONF: Delta's extension, microsecond timestamps, UTC, the codegen
cache) are added where spark-submit did not set them. Jars missing from the session are one
line naming the ``--packages`` to give.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import typer

from common.errors import BottlerError
from common.logs import setup_logging
from common.options import settings_command
from common.redact import redact
from materializers.warehouse.cli import WarehouseSettings, load, prepare

log = logging.getLogger("materializers.warehouse.submit")  # also when run as a file

APP = "bottler-warehouse"
NEEDED = {  # a class of each jar the route uses, and the jar
    "org.apache.spark.sql.kafka010.KafkaSourceProvider": "spark-sql-kafka-0-10",
    "org.apache.spark.sql.avro.AvroDataToCatalyst": "spark-avro",
    "io.delta.tables.DeltaTable": "delta-spark",
}


@settings_command
def submitted_warehouse(s: WarehouseSettings) -> None:
    """The warehouse's spark route in spark-submit's session (docs/warehouse.md)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        raise BottlerError("this file is a Spark application: run it through spark-submit",
                           "or run `bottler materialize warehouse --route spark`")
    if s.route != "spark" and "route" in s.flags:
        raise BottlerError(f"--route {s.route}: spark-submit runs the spark route only",
                           "leave --route out, or run `bottler materialize warehouse`")
    s = s.model_copy(update={"route": "spark"})
    owned = prepare(s)
    spark = session()
    try:
        load(s, spark, owned)
    finally:
        spark.stop()


def session() -> Any:
    """spark-submit's session, with the route's settings it does not set itself."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    from materializers.warehouse.job import SPARK_ROUTE_CONF

    SparkContext._ensure_initialized()  # spark-submit's JVM, whose settings SparkConf reads
    given = SparkConf()
    builder = SparkSession.builder.appName(given.get("spark.app.name", APP))
    for name, value in SPARK_ROUTE_CONF.items():
        if not given.contains(name):
            builder = builder.config(name, value)
    spark = builder.getOrCreate()
    log.info("warehouse: Spark session on %s", spark.sparkContext.master)
    try:
        check_jars(spark)
    except BottlerError:
        spark.stop()
        raise
    return spark


def check_jars(spark: Any) -> None:
    """One line naming the ``--packages`` to give when a jar the route needs is missing."""
    from materializers.warehouse.jars import packages

    jvm = spark.sparkContext._jvm
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    missing = []
    for name, jar in NEEDED.items():
        try:
            jvm.java.lang.Class.forName(name, False, loader)
        except Exception:  # noqa: BLE001 - py4j raises its own error for a missing class
            missing.append(jar)
    if missing:
        raise BottlerError(f"{', '.join(missing)} not on the Spark session's classpath",
                           f"give spark-submit --packages {packages()} (or their jars with "
                           "--jars)")


def main(argv: list[str] | None = None) -> None:
    """The command's options and errors as bottler's (one line, passwords redacted)."""
    setup_logging()
    logging.getLogger("py4j").setLevel(logging.WARNING)
    app = typer.Typer(add_completion=False)
    app.command()(submitted_warehouse)
    command = typer.main.get_command(app)
    try:
        command.main(argv if argv is not None else sys.argv[1:], prog_name="submit.py")
    except BottlerError as exc:
        print(f"error: {redact(str(exc))}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
