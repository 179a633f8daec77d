"""Apicurio Registry 3 as the embedded stack's schema registry instead of ours
(``BOTTLER_STACK_REGISTRY=apicurio``): the Quarkus application Apicurio publishes on Maven
Central (pinned in compose/jars/pom.xml, profile ``apicurio``), on loopback, its schemas in an H2
database under ``<stack>/apicurio`` so that they survive its restarts. bottler speaks to it
through its Confluent-compatible API, ``/apis/ccompat/v7``: docs/stack.md says what it costs
against ours, docs/operations.md ("Another schema registry") where its answers differ."""

from __future__ import annotations

import os
from pathlib import Path

from common.errors import BottlerError
from compose import jars

PROFILE = "apicurio"
JAVA = 21  # Apicurio 3.3 is built for Java 21
CCOMPAT = "/apis/ccompat/v7"  # the Confluent-compatible API under the server's root
MARKER = "apicurio-registry-app"  # in the path of its jar: our process behind a PID
HEAP = "256m"
JVM_OPTIONS = [
    f"-Xmx{HEAP}", "-XX:+UseSerialGC", "-XX:+ExitOnOutOfMemoryError",
    "-Djava.util.logging.manager=org.jboss.logmanager.LogManager",  # as Apicurio's image
]

REGISTRIES = ("bottler", "apicurio")
REGISTRY_ENV = "BOTTLER_STACK_REGISTRY"


def chosen(remembered: str | None = None) -> str:
    """The registry the stack runs: the one ``BOTTLER_STACK_REGISTRY`` names, else the one it
    was made with (``remembered``), else ours (``bottler``)."""
    name = os.environ.get(REGISTRY_ENV) or remembered or "bottler"
    if name not in REGISTRIES:
        raise BottlerError(f"{REGISTRY_ENV}={name} is no registry the stack runs",
                           f"choose among {', '.join(REGISTRIES)}, or unset it")
    return name


def settings(home: Path, port: int) -> dict[str, str]:
    """Quarkus's and Apicurio's settings (system properties) of the stack's registry."""
    return {
        "quarkus.http.host": "127.0.0.1",
        "quarkus.http.port": str(port),
        # health and metrics on a port of their own: one the kernel picks, on loopback
        "quarkus.management.host": "127.0.0.1",
        "quarkus.management.port": "0",
        "quarkus.http.access-log.enabled": "false",  # a line per request
        # H2 in a file, not in memory (Apicurio's default): a restarted registry must still
        # know the ids the topics' messages carry
        "apicurio.datasource.url": f"jdbc:h2:file:{home / 'registry'};DB_CLOSE_ON_EXIT=FALSE",
        "apicurio.datasource.jdbc.initial-size": "2",
        "apicurio.datasource.jdbc.min-size": "2",
        "apicurio.datasource.jdbc.max-size": "10",
    }


class ApicurioNode:
    """The registry's files under ``<stack>/apicurio``: its H2 database."""

    def __init__(self, stack: Path, port: int):
        self.home = stack / "apicurio"
        self.port = port

    def check(self) -> tuple[str, Path]:
        """Refuse what would keep it from starting, before anything of the stack starts: no
        Java 21, no application (fetched here if missing). Returns java and the jar."""
        java = jars.java(JAVA, "Apicurio Registry", installed=True)
        [app] = jars.pinned(PROFILE)
        return java, jars.fetch(PROFILE) / app / "quarkus-run.jar"

    def argv(self, java: str, jar: Path) -> list[str]:
        return [java, *JVM_OPTIONS, *jars.extra_jvm_options(),
                *(f"-D{key}={value}" for key, value in settings(self.home, self.port).items()),
                "-jar", str(jar)]

    def prepare(self) -> list[str]:
        java, jar = self.check()
        self.home.mkdir(parents=True, exist_ok=True)
        return self.argv(java, jar)


def missing_jar(output: str) -> BottlerError | None:
    """A missing jar of the application, in one line (compose/jars.py)."""
    return jars.missing_jar(output, PROFILE, "Apicurio Registry")
