"""The spark route's class-data archive (materializers/warehouse/cds.py) is never a failure:
a cache it cannot write, or a build under way in another process, leave the session without
one; its name changes with the jars it was built for."""

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


def test_no_archive_when_the_cache_cannot_be_written_or_another_builds_it(tmp_path,
                                                                           monkeypatch):
    jar = tmp_path / "delta.jar"
    jar.write_bytes(b"one")
    blocked = tmp_path / "file"
    blocked.write_bytes(b"")
    monkeypatch.setenv("BOTTLER_JARS_DIR", str(blocked / "jars"))  # its parent is a file
    assert cds.java_options([str(jar)]) == ""

    monkeypatch.setenv("BOTTLER_JARS_DIR", str(tmp_path / "jars"))
    archive = cds.archive([str(jar)])
    archive.parent.mkdir(parents=True)
    archive.with_suffix(".building").write_bytes(b"")  # another process's build, under way
    assert cds.java_options([str(jar)]) == ""
    assert not archive.exists()
    archive.write_bytes(b"")  # once built, it is used
    assert cds.java_options([str(jar)]).startswith(f"-XX:SharedArchiveFile={archive} ")
