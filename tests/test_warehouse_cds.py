"""The spark route's class-data archive (materializers/warehouse/cds.py) is never a failure:
a session without one starts as before, a build under way in another process is not waited
for; its name changes with the jars it was built for."""

from __future__ import annotations

from materializers.warehouse import cds


def test_the_archive_is_named_for_its_java_pyspark_and_jars(tmp_path, monkeypatch):
    monkeypatch.setenv("BOTTLER_JARS_DIR", str(tmp_path / "jars"))
    jar = tmp_path / "delta.jar"
    jar.write_bytes(b"one")
    first = cds.archive([str(jar)])
    assert first.parent == tmp_path / "cds" and first.suffix == ".jsa"
    assert cds.archive([str(jar)]) == first
    jar.write_bytes(b"another")
    assert cds.archive([str(jar)]) != first


def test_a_session_never_builds_and_a_build_under_way_elsewhere_is_not_waited_for(
        tmp_path, monkeypatch):
    jar = tmp_path / "delta.jar"
    jar.write_bytes(b"one")
    monkeypatch.setenv("BOTTLER_JARS_DIR", str(tmp_path / "jars"))
    archive = cds.archive([str(jar)])
    assert cds.java_options([str(jar)]) == ""  # none yet: the session starts without
    assert not archive.exists() and not archive.parent.exists()  # and none is built
    archive.parent.mkdir(parents=True)
    archive.with_suffix(".building").write_bytes(b"")  # another process's build, under way
    cds.build(archive)  # returns at once
    assert not archive.exists()
    archive.write_bytes(b"")  # once built, it is used
    assert cds.java_options([str(jar)]).startswith(f"-XX:SharedArchiveFile={archive} ")
