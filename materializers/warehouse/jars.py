"""The Spark jars the warehouse job adds to pyspark's own: Spark's Kafka source
(``spark-sql-kafka-0-10``), its Avro functions (``spark-avro``) and Delta Lake's Spark connector
(``delta-spark``), pinned in ``compose/jars/pom.xml`` (profile ``spark``) and fetched from Maven
Central by ``compose.jars`` (``make deps``).

Maven copies each artifact's dependencies too, among them older copies of jars pyspark ships
(Hadoop, Jackson, Parquet, Scala's library): those are left out, pyspark's own are used, so the
classpath holds one version of each library. The pins must match the Python packages: Spark's
jars are built for one Spark version, delta-spark's for one Spark minor version and its own
version. A mismatch, or a jar missing, is one line naming the pin to fix (:func:`check`)."""

from __future__ import annotations

import re
from pathlib import Path

from common.errors import BottlerError

PROFILE = "spark"
POM = "compose/jars/pom.xml"
KAFKA, AVRO = "spark-sql-kafka-0-10_2.13", "spark-avro_2.13"
DELTA = re.compile(r"delta-spark_(\d+\.\d+)_2\.13-(.+)\.jar$")
_VERSIONED = re.compile(r"^(.+?)-\d[\w.\-]*\.jar$")


def _artifact(jar: str) -> str:
    found = _VERSIONED.match(jar)
    return found[1] if found else jar


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


def check(directory: Path, spark_version: str, delta_version: str) -> None:
    """One line naming the pin when the jars in ``directory`` are missing or do not match
    pyspark ``spark_version`` and the delta-spark Python package ``delta_version``."""
    names = [p.name for p in directory.glob("*.jar")]
    hint = f"set the spark profile's pins in {POM} to the installed packages, then `make deps`"
    for artifact in (KAFKA, AVRO):
        found = [n for n in names if n.startswith(artifact + "-")]
        if not found:
            raise BottlerError(f"{artifact} is missing from {directory} (pin spark.version in "
                               f"{POM})", hint)
        version = found[0][len(artifact) + 1:-len(".jar")]
        if version != spark_version:
            raise BottlerError(f"{found[0]} does not match pyspark {spark_version} (pin "
                               f"spark.version in {POM})", hint)
    delta = [m for n in names if (m := DELTA.match(n))]
    if not delta:
        raise BottlerError(f"delta-spark is missing from {directory} (pin delta.version in "
                           f"{POM})", hint)
    spark_minor = ".".join(spark_version.split(".")[:2])
    built_for, version = delta[0][1], delta[0][2]
    if built_for != spark_minor:
        raise BottlerError(f"{delta[0][0]} is built for Spark {built_for}, pyspark is "
                           f"{spark_version} (pin delta.spark in {POM})", hint)
    # Maven Central may lag a patch release behind PyPI: the Python package is a thin layer on
    # the JVM's API, which keeps its major.minor version
    if version.split(".")[:2] != delta_version.split(".")[:2]:
        raise BottlerError(f"{delta[0][0]} does not match the delta-spark Python package "
                           f"{delta_version} (pin delta.version in {POM})", hint)


def spark_jars(directory: Path | None = None) -> list[str]:
    """The jars to add to the session (``spark.jars``): the spark profile's, fetched if
    missing and checked against the Python packages, less those pyspark ships."""
    import importlib.metadata

    import pyspark

    from compose import jars

    directory = directory or jars.fetch(PROFILE)
    check(directory, pyspark.__version__, importlib.metadata.version("delta-spark"))
    shipped = {_artifact(p.name) for p in pyspark_jars().glob("*.jar")}
    return sorted(str(p) for p in directory.glob("*.jar") if _artifact(p.name) not in shipped)


def packages() -> str:
    """The spark profile's pins as spark-submit's ``--packages`` (Maven coordinates), for a
    cluster that fetches its own jars."""
    from compose import jars

    out = []
    for jar in jars.pinned(PROFILE):
        artifact, version = re.fullmatch(r"(.+)-(\d+(?:\.\d+)+)\.jar", jar).groups()
        group = "io.delta" if artifact.startswith("delta-") else "org.apache.spark"
        out.append(f"{group}:{artifact}:{version}")
    return ",".join(out)
