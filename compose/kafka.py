"""Apache Kafka for the embedded stack: one KRaft node that is both broker and controller, run
from the jars pinned in compose/jars/pom.xml. Its settings are those of a single node on a small
machine; docs/stack.md explains each one."""

from __future__ import annotations

import base64
import subprocess
import uuid
from pathlib import Path

from common.errors import BottlerError
from compose import jars

HEAP = "512m"  # a 2-core, 24 GiB machine: the broker holds little beyond the page cache
JVM_OPTIONS = [
    f"-Xms{HEAP}", f"-Xmx{HEAP}", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
]

# One node: every internal topic has one replica, and nothing waits for members that may join.
SETTINGS = {
    "process.roles": "broker,controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "10",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "4",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "min.insync.replicas": "1",
    "group.initial.rebalance.delay.ms": "0",
    # bottler creates every topic it writes, with the settings it needs (compaction above all):
    # a topic that springs into being on first use would hide a missing creation.
    "auto.create.topics.enable": "false",
    "num.network.threads": "2",
    "num.io.threads": "4",
    "log.cleaner.threads": "1",
    "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
}

LOG4J = """\
Configuration:
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
    Logger:
      # a line per request is the request logger's: warnings only
      - name: kafka.request.logger
        level: WARN
"""


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, base64url without padding (Kafka's Uuid), not
    starting with '-' (Kafka's tools would take it for an option; Kafka skips those too)."""
    while (found := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
           ).startswith("-"):
        pass
    return found


class KafkaNode:
    """The node's files under ``<stack>/kafka``: its settings, its log4j configuration and its
    data directory, formatted once for the stack's cluster id.

    ``settings`` are added to (or replace) the single node's; ``scram_users`` (name: password)
    are SCRAM-SHA-512 users written into the metadata when the storage is formatted: a broker
    whose clients all authenticate needs its first (super) user before it starts."""

    def __init__(self, stack: Path, port: int, controller_port: int, cluster_id: str,
                 settings: dict[str, str] | None = None,
                 scram_users: dict[str, str] | None = None):
        self.home = stack / "kafka"
        self.data = self.home / "data"
        self.port = port
        self.controller_port = controller_port
        self.cluster_id = cluster_id
        self.extra = settings or {}
        self.scram_users = scram_users or {}

    @property
    def properties(self) -> Path:
        return self.home / "server.properties"

    @property
    def log4j(self) -> Path:
        return self.home / "log4j2.yaml"

    def settings(self) -> dict[str, str]:
        return {
            **SETTINGS,
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
                         f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": str(self.data),
            **self.extra,
        }

    def argv(self, java: str, classpath: str) -> list[str]:
        return [java, *JVM_OPTIONS, *jars.extra_jvm_options(),
                f"-Dlog4j2.configurationFile={self.log4j}",
                "-cp", classpath, "kafka.Kafka", str(self.properties)]

    def check(self) -> tuple[str, str]:
        """Refuse what would keep the node from starting, before anything of the stack starts:
        no Java 17, no jars (fetched here if missing), a data directory formatted for another
        cluster (refused, not reused). Returns the java binary and the classpath."""
        java, classpath = jars.java(), jars.classpath("kafka")
        formatted = self.formatted_for()
        if formatted is not None and formatted != self.cluster_id:
            raise BottlerError(
                f"Kafka's data directory {self.data} was formatted for cluster {formatted}, "
                f"not this stack's ({self.cluster_id})",
                "move that directory away, or `bottler stack reset` to start afresh (this "
                "deletes the stack's data)")
        return java, classpath

    def prepare(self) -> list[str]:
        """Write the node's settings, format its storage if it is new, and return the command
        that runs it."""
        java, classpath = self.check()
        self.home.mkdir(parents=True, exist_ok=True)
        self.properties.write_text(
            "".join(f"{key}={value}\n" for key, value in self.settings().items()))
        self.log4j.write_text(LOG4J)
        if self.formatted_for() is None:
            self._format(java, classpath)
        return self.argv(java, classpath)

    def formatted_for(self) -> str | None:
        """The cluster id the data directory was formatted for; None if it is not formatted."""
        meta = self.data / "meta.properties"
        if not meta.exists():
            return None
        for line in meta.read_text(errors="replace").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id":
                return value.strip()
        return ""

    def _format(self, java: str, classpath: str) -> None:
        # StorageTool takes SCRAM users on its command line only (`ps` shows them while it
        # runs, a second or two): fit for a first admin user, the others are added through
        # the admin API (AlterUserScramCredentials) once the node runs.
        users = [arg for name, password in self.scram_users.items()
                 for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")]
        done = subprocess.run(
            [java, "-Xmx256m", *jars.extra_jvm_options(),
             f"-Dlog4j2.configurationFile={self.log4j}", "-cp", classpath,
             "kafka.tools.StorageTool", "format", "--ignore-formatted",
             "-t", self.cluster_id, "-c", str(self.properties), *users],
            capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            if missing := missing_jar(done.stdout + done.stderr):
                raise missing
            last = ((done.stderr.strip() or done.stdout.strip()).splitlines() or ["?"])[-1]
            for password in self.scram_users.values():
                last = last.replace(password, "***")
            raise BottlerError(f"formatting Kafka's storage in {self.data} failed: {last}",
                               "see the message; `bottler stack reset` starts afresh")


def missing_jar(output: str) -> BottlerError | None:
    """A missing jar of Kafka's classpath, in one line (compose/jars.py)."""
    return jars.missing_jar(output, "kafka", "Kafka")
