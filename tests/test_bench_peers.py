"""The peers bench's report (tests/bench/peers.py) and Connect's settings files
(tests/bench/connect.py), from hand-made figures: no stack, no JVM."""

from __future__ import annotations

import re
import stat

from compose import jars
from tests.bench import connect, peers


def test_the_table_gives_bottler_over_the_peer_and_escapes_pipes():
    rows = [peers.Row("snapshot (rows/s)", 20_000, 60_000, "rows/s", "higher"),
            peers.Row("copy against pg_dump | psql", 500_000, 250_000, "rows/s", "higher"),
            peers.Row("CPU s per 1M rows", 40.0, 10.0, "s", "lower")]
    text = peers.markdown(rows, ["machine: 2 CPUs, load average 1.00 1.00 1.00"], ["a note"])
    assert "| snapshot (rows/s) | 20,000 rows/s | 60,000 rows/s | 3.00× | higher |" in text
    assert "pg_dump \\| psql | 500,000 rows/s | 250,000 rows/s | 0.50× |" in text
    assert "| CPU s per 1M rows | 40.0 s | 10.0 s | 0.25× | lower |" in text
    assert "load average 1.00" in text and "- a note" in text


def test_every_debezium_setting_is_listed_and_no_password():
    listed = "\n".join(peers.markdown([], [], []).splitlines())
    for settings in (connect.WORKER, peers.SOURCE, peers.SINK):
        for key, value in settings.items():
            assert f"{key}={value}" in listed
    assert "password" not in listed


def test_the_versions_are_the_pinned_ones():
    pom = jars.POM.read_text()
    line = peers.versions()
    for prop in ("debezium.version", "debezium.jdbc.version", "connect.version"):
        pinned = re.search(rf"<{re.escape(prop)}>([^<]+)</", pom)[1]
        assert pinned in line, prop
    assert "?" not in line


def test_connect_settings_files_are_private(tmp_path):
    written = connect._properties(tmp_path / "c.properties", {"database.password": "s3cret"})
    assert written.read_text() == "database.password=s3cret\n"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
