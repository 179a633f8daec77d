"""The class-data archive's build (cds.py), run as its child process:

    python -m materializers.warehouse.cds_dump TARGET

A session of the spark route that uses what the route uses, then exits, its JVM writing the
archive to TARGET as it goes."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from delta.tables import DeltaTable
from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention
from pyspark.sql.avro.functions import from_avro, to_avro

from materializers.warehouse import jvm
from materializers.warehouse.cds import EXIT_GRACE
from materializers.warehouse.job import spark_session


def dump(target: Path) -> None:
    """(the build's child) A session of the route that writes the archive to ``target`` as its
    JVM exits, after using what the route uses: the Kafka source's plan, ``from_avro``, a
    Delta table appended to and merged into."""
    spark = spark_session(route="spark", dump=target)
    try:
        (spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9")
         .option("subscribe", "none").load())
        schema = ('{"type": "record", "name": "r", "fields": [{"name": "id", "type": "long"}, '
                  '{"name": "name", "type": ["null", "string"]}]}')
        rows = spark.range(100).select("id", F.col("id").cast("string").alias("name"))
        rows = rows.select(to_avro(F.struct("id", "name"), schema).alias("v")).select(
            from_avro("v", schema).alias("r")).select("r.*")
        with tempfile.TemporaryDirectory(prefix="bottler-cds-") as scratch:
            rows.write.format("delta").save(scratch)
            (DeltaTable.forPath(spark, scratch).alias("t").merge(rows.alias("s"), "t.id = s.id")
             .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    finally:
        jvm.stop(spark, grace=EXIT_GRACE)


if __name__ == "__main__":
    dump(Path(sys.argv[1]))
