"""Kafka Connect standalone (``org.apache.kafka.connect.cli.ConnectStandalone``) from the jars
pinned in compose/jars/pom.xml, running Debezium's connectors as plugins: the peer the peers
bench (tests/bench/peers.py) measures bottler against. Its files (worker and connector settings,
which hold the database password, the offsets, a plugin directory) live in a private temporary
directory removed by ``cleanup()``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import zipfile
from pathlib import Path

from psycopg.conninfo import conninfo_to_dict

from compose import apicurio, jars
from compose.procs import free_port
from tests.bench.latency import avro_id
from tests.bench.procs import CaptureProcess, peak_kb

TASK_DIED = re.compile(r"unrecoverable exception|Failed to start (task|connector)")
PLUGINS = ("debezium-postgres", "debezium-jdbc")  # profiles of compose/jars/pom.xml

# As bin/connect-standalone.sh starts it (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS).
JVM_OPTIONS = ["-Xms256M", "-Xmx2G", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
               "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
               "-Djava.awt.headless=true"]

FORMATS = ("json", "avro")  # what Debezium's connectors write: --debezium-format
# The worker's converters: JSON with the schema inline in every message (Debezium's JDBC sink
# needs a record's schema), or Avro through Apicurio's converter and registry (the schema id in
# the message, as the capture's).
JSON = {
    "key.converter": "org.apache.kafka.connect.json.JsonConverter",
    "value.converter": "org.apache.kafka.connect.json.JsonConverter",
    "key.converter.schemas.enable": "true",
    "value.converter.schemas.enable": "true",
}
AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"
# Apicurio's converter (2.6, compose/jars/pom.xml profile apicurio-converter) on the registry's
# v2 API; Confluent's framing (a zero byte and a 4-byte content id in the payload, no headers),
# as the capture writes.
AVRO = {
    **{f"{side}.converter": AVRO_CONVERTER for side in ("key", "value")},
    **{f"{side}.converter.apicurio.registry.{k}": v for side in ("key", "value") for k, v in {
        "auto-register": "true",
        "find-latest": "true",
        "headers.enabled": "false",
        "id-handler": "io.apicurio.registry.serde.Legacy4ByteIdHandler",
        "use-id": "contentId",
    }.items()},
}
AVRO_PLUGIN = "apicurio-converter"  # the profile of compose/jars/pom.xml
APICURIO_V2 = "/apis/registry/v2"  # the API Apicurio's converter 2.6 speaks, beside ccompat

# The worker: the producer batching as Debezium's and Kafka's documentation advise for
# throughput; lz4, as the capture's producer.
WORKER = {
    "offset.flush.interval.ms": "1000",
    "plugin.discovery": "service_load",  # Debezium's jars have manifests: no class scan
    "producer.acks": "all",
    "producer.enable.idempotence": "true",
    "producer.linger.ms": "20",
    "producer.batch.size": "262144",
    "producer.compression.type": "lz4",
    "producer.buffer.memory": "67108864",
    "consumer.max.poll.records": "10000",  # the JDBC sink's batches are at most one poll
    "consumer.fetch.min.bytes": "1048576",
    "consumer.fetch.max.wait.ms": "100",
}

# Debezium's PostgreSQL connector, tuned for throughput as its documentation advises; its topics
# stamped with the broker's append time, as the capture's (for the latency figure).
SOURCE = {
    "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
    "tasks.max": "1",
    "plugin.name": "pgoutput",
    "publication.autocreate.mode": "filtered",
    "snapshot.mode": "initial",
    "max.batch.size": "20480",  # default 2048
    "max.queue.size": "81920",  # default 8192; at least max.batch.size × 4
    "poll.interval.ms": "50",  # default 500
    "snapshot.fetch.size": "20480",  # default 10240
    "topic.creation.default.replication.factor": "1",
    "topic.creation.default.partitions": "1",
    "topic.creation.default.message.timestamp.type": "LogAppendTime",
}
# Debezium's JDBC sink: upserts keyed by the record key, batches as large as one poll.
SINK = {
    "connector.class": "io.debezium.connector.jdbc.JdbcSinkConnector",
    "tasks.max": "1",
    "insert.mode": "upsert",
    "primary.key.mode": "record_key",
    "delete.enabled": "true",
    "schema.evolution": "none",
    "batch.size": "10000",  # default 500
    "collection.name.format": "${source.table}",
}


def database_settings(dsn: str) -> dict[str, str]:
    """Debezium's connection settings for the database of ``dsn``."""
    pg = conninfo_to_dict(dsn)
    return {"database.hostname": pg["host"], "database.port": str(pg["port"]),
            "database.user": pg["user"], "database.password": pg["password"],
            "database.dbname": pg["dbname"]}


def converters(fmt: str, registry: str) -> dict[str, str]:
    """The worker's converter settings for ``fmt``; ``registry`` is the stack's (Apicurio's
    Confluent-compatible API, for Avro)."""
    if fmt == "json":
        return JSON
    if not registry.endswith(apicurio.CCOMPAT):
        raise ValueError(f"Debezium's Avro needs Apicurio as the registry, not {registry}")
    url = registry.removesuffix(apicurio.CCOMPAT) + APICURIO_V2
    return {**AVRO, **{f"{side}.converter.apicurio.registry.url": url
                       for side in ("key", "value")}}


def key_reader(fmt: str):
    """The row's id from Debezium's key in ``fmt``."""
    return key_id if fmt == "json" else avro_id


def key_id(key: bytes) -> int:
    """The row's id from Debezium's JSON key (``{"schema": …, "payload": {"id": N}}``)."""
    return int(json.loads(key)["payload"]["id"])


LOG4J = """\
status = error
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %-5p %c{1} %m%n
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
logger.debezium.name = io.debezium
logger.debezium.level = INFO
logger.runtime.name = org.apache.kafka.connect.runtime.Worker
logger.runtime.level = INFO
"""


def _properties(path: Path, settings: dict[str, str]) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
    path.chmod(0o600)
    return path


def _converter_plugin(where: Path) -> None:
    """Apicurio's converter as a plugin directory: its jars, and a jar of our own naming the
    converter for Java's ServiceLoader (Apicurio's jar names none, and the worker finds plugins
    that way alone: ``plugin.discovery=service_load``)."""
    where.mkdir()
    for jar in jars.fetch(AVRO_PLUGIN).glob("*.jar"):
        (where / jar.name).symlink_to(jar)
    with zipfile.ZipFile(where / "converter-services.jar", "w") as services:
        services.writestr("META-INF/services/org.apache.kafka.connect.storage.Converter",
                          AVRO_CONVERTER + "\n")


class ConnectProcess(CaptureProcess):
    """One Kafka Connect standalone worker running ``connectors`` (name → settings), watched as
    the capture is (log lines, peak RSS); its offsets survive a restart."""

    def __init__(self, name: str, bootstrap: str, connectors: dict[str, dict[str, str]],
                 log: Path, converter: dict[str, str] = JSON):
        super().__init__(name, {}, [])
        self.log = log  # the worker's output, kept after cleanup
        self.home = Path(tempfile.mkdtemp(prefix="bench-connect-"))
        self.home.chmod(0o700)
        plugins = self.home / "plugins"
        plugins.mkdir()
        for profile in PLUGINS:
            (plugins / profile).symlink_to(jars.fetch(profile), target_is_directory=True)
        if converter.get("value.converter") == AVRO_CONVERTER:
            _converter_plugin(plugins / AVRO_PLUGIN)
        self.classpath = jars.classpath("connect")
        self.java = jars.java()
        (self.home / "log4j2.properties").write_text(LOG4J)
        self.worker = _properties(self.home / "worker.properties", {
            **converter, **WORKER, "bootstrap.servers": bootstrap, "plugin.path": str(plugins),
            "offset.storage.file.filename": str(self.home / "offsets"),
            "listeners": f"http://127.0.0.1:{free_port()}",
        })
        self.connectors = [_properties(self.home / f"{n}.properties", {"name": n, **c})
                           for n, c in connectors.items()]

    def start(self) -> ConnectProcess:
        self.started_at = time.monotonic()
        self.lines = []
        self._proc = subprocess.Popen(
            [self.java, *JVM_OPTIONS,
             f"-Dlog4j2.configurationFile={self.home / 'log4j2.properties'}",
             "-cp", self.classpath, "org.apache.kafka.connect.cli.ConnectStandalone",
             str(self.worker), *map(str, self.connectors)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
            env={k: v for k, v in os.environ.items() if not k.startswith("BOTTLER_")},
        )
        threading.Thread(target=self._read, args=(self._proc,), daemon=True).start()
        threading.Thread(target=self._sample, args=(self._proc,), daemon=True).start()
        return self

    def _read(self, proc: subprocess.Popen) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as out:
            for line in proc.stdout:
                out.write(line)
                out.flush()
                with self._cond:
                    self.lines.append((time.monotonic(), line.rstrip("\n")))
                    self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def check_alive(self) -> None:
        """Also a task that died: Connect logs it and lives on without it."""
        super().check_alive()
        if any(TASK_DIED.search(line) for _, line in self.lines):
            self._fail("lost a task")

    def stop(self) -> None:
        """SIGTERM: Connect stops its tasks and flushes their offsets; the JVM then exits with
        143 (128 + SIGTERM) from its shutdown hook."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self.peak_kb = max(self.peak_kb, peak_kb(self.pid))
            self._proc.terminate()
            try:
                self._proc.wait(120)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
                raise RuntimeError(f"Kafka Connect {self.name} did not stop on SIGTERM") from None
        if self._proc.returncode not in (0, 143, -15):
            self._fail(f"ended with status {self._proc.returncode}")

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.home, ignore_errors=True)
