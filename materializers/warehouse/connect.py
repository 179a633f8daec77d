"""A Spark session that stays, for the spark route (native.py): Spark Connect.

A `--once` load that starts its own JVM pays Spark's start and the JIT's warm-up each time: 7-8
CPU s and most of its wall time on a small load (docs/warehouse.md, "A JVM that stays").
``bottler warehouse serve`` (:func:`serve`) keeps the spark route's session (its jars, Delta's
extension, its settings) running and serves it over Spark Connect, Spark's own client protocol;
``bottler materialize warehouse --route spark --spark-remote sc://host:port`` (:func:`session`)
runs the same route as a client of it, in a session of its own on the server (its settings, its
temporary views), which the server keeps warm for the next.

Over Connect the route drives its batches from the client (native.py): a ``foreachBatch``
function would run in a Python process of the server's, whose effects never reach the client.
The server's port is unauthenticated: it listens on loopback unless told otherwise.

A server that stops answering mid-run (killed, or restarted: its sessions are then new) ends the
client's run in about a minute with one line (:func:`remote_session`), not pyspark's ten minutes
of retries, after which the client measured here still hung: the batches committed are kept, and
the next run resumes from where the Delta tables stand.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from common.errors import BottlerError

log = logging.getLogger(__name__)

PLUGIN = "org.apache.spark.sql.connect.SparkConnectPlugin"  # pyspark ships its jar
# pyspark's retries of a server that does not answer: 50 ms to 51 s apart, 68 s in all (its
# default, 15, waits ten minutes, silently)
RETRIES = 6
RESUME = ("the batches committed are kept, and the next run resumes from where the Delta tables "
          "stand: start the server again (`bottler warehouse serve`), then this job")


def remote(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect client's session."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def session(url: str) -> Any:
    """A session of the Spark Connect server at ``url`` (``sc://host:port``), with the spark
    route's settings a session may set (the static ones are the server's: Delta's extension,
    checked); one line when it does not answer or is not such a server."""
    from pyspark.sql.connect.session import SparkSession

    from materializers.warehouse.job import SPARK_ROUTE_CONF

    parsed = urlsplit(url)
    if parsed.scheme != "sc" or not parsed.hostname:
        raise BottlerError(f"--spark-remote {url!r} is not a Spark Connect address",
                           "give it as sc://host:port (`bottler warehouse serve` prints it)")
    hint = ("start one with `bottler warehouse serve` (or point --spark-remote at yours), or "
            "leave --spark-remote out to start a local session")
    refused = _refused(url)  # the client retries an address that refuses: asked once here
    if refused is not None:
        raise BottlerError(f"no Spark Connect server answers at {url}: "
                           f"{refused.strerror or refused}", hint)
    # pyspark's functions build Connect's columns in a process marked so (pyspark's own
    # builder marks it too, but refuses a process that ran a local session: the tests' do)
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    try:
        spark = SparkSession.builder.remote(url).create()
        spark.client.set_retry_policies([_retries(url)])
        extensions = spark.conf.get("spark.sql.extensions", "") or ""
    except Exception as exc:  # noqa: BLE001 - grpc's errors: the address is what to fix
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BottlerError(f"no Spark Connect server answers at {url}: {first[:300]}",
                           hint) from None
    if SPARK_ROUTE_CONF["spark.sql.extensions"] not in extensions:
        spark.stop()
        raise BottlerError(f"the Spark Connect server at {url} has no Delta Lake (its "
                           "spark.sql.extensions lacks io.delta.sql.DeltaSparkSessionExtension)",
                           "serve the spark route's session with `bottler warehouse serve`, "
                           "or start yours with the --packages docs/warehouse.md gives")
    for name, value in SPARK_ROUTE_CONF.items():
        if spark.conf.isModifiable(name):  # the others are the server's (static)
            spark.conf.set(name, value)
    return spark


@contextmanager
def remote_session(url: str) -> Iterator[Any]:
    """:func:`session`, stopped after (its session on the server; the server stays). A server
    that stops answering, or restarted, mid-run: one line (:func:`_gone`), the stop's release
    of the session asked once."""
    spark = session(url)
    gone = None
    try:
        yield spark
    except Exception as exc:
        gone = _gone(url, exc)
        if gone is None:
            raise
        spark.client.set_retry_policies([])
        raise gone from None
    finally:
        try:
            spark.stop()
        except Exception:
            if gone is None:
                raise


def _gone(url: str, exc: BaseException) -> BottlerError | None:
    """The one line of a run whose server at ``url`` stopped answering or restarted (None:
    ``exc`` is another error)."""
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    if not isinstance(exc, SparkConnectGrpcException):
        return None
    text = str(exc)
    if "SESSION_CHANGED" in text:
        return BottlerError(f"the Spark Connect server at {url} restarted mid-run (this job's "
                            "session is gone with it)", RESUME)
    if "UNAVAILABLE" in text or _refused(url) is not None:
        return BottlerError(f"the Spark Connect server at {url} stopped answering mid-run",
                            RESUME)
    return None


def _refused(url: str) -> OSError | None:
    """Why nothing answers at ``url``'s address (asked once, with a socket), or None."""
    parsed = urlsplit(url)
    try:
        socket.create_connection((parsed.hostname, parsed.port or 15002), timeout=10).close()
    except OSError as exc:
        return exc
    return None


def _retries(url: str) -> Any:
    """pyspark's retry policy (its DefaultPolicy), bounded to ``RETRIES``, each retry said."""
    from pyspark.sql.connect.client.retries import DefaultPolicy

    class Said(DefaultPolicy):
        seen: BaseException | None = None

        def can_retry(self, e: BaseException) -> bool:
            retry = super().can_retry(e)
            if retry and e is not self.seen:  # asked again of the same error before its wait
                self.seen = e
                log.warning("warehouse: no answer from the Spark Connect server at %s; asking "
                            "again (for about a minute in all)", url)
            return retry

    return Said(max_retries=RETRIES)


def server_conf(host: str, port: int, master: str) -> dict[str, str]:
    """The settings that make the route's session a Spark Connect server on ``host:port``;
    with a local master, its parallelism (which a client cannot ask its session for) as
    ``spark.default.parallelism``."""
    conf = {"spark.plugins": PLUGIN, "spark.connect.grpc.binding.address": host,
            "spark.connect.grpc.binding.port": str(port)}
    cores = re.fullmatch(r"local\[(\d+)\]", master)
    if cores:
        conf["spark.default.parallelism"] = cores.group(1)
    return conf


def parallelism(spark: Any) -> int | None:
    """The session's default parallelism: its context's, or over Connect the server's setting
    (None when it has none)."""
    if not remote(spark):
        return spark.sparkContext.defaultParallelism
    value = spark.conf.get("spark.default.parallelism", None)
    return int(value) if value else None


def serve(host: str, port: int, master: str, stop: Any) -> None:
    """The spark route's session served over Spark Connect until ``stop`` is set; its JVM
    ends with this process."""
    from materializers.warehouse import jvm
    from materializers.warehouse.job import spark_session

    spark = spark_session(master, route="spark", conf=server_conf(host, port, master))
    try:
        log.info("warehouse: serving the spark route's session on sc://%s:%d "
                 "(--spark-remote)", host, port)
        stop.wait()
    finally:
        jvm.stop(spark)
