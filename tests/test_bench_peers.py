"""The peers bench's report (tests/bench/peers_report.py: the table, the chart), its options
(tests/bench/peers.py), Connect's settings files and keys (tests/bench/connect.py), from
hand-made figures: no stack, no JVM."""

from __future__ import annotations

import argparse
import json
import re
import stat

import pytest

from compose import jars
from tests.bench import connect, peers, peers_report
from tests.bench.latency import avro_id


def test_the_table_gives_bottler_over_the_peer_and_escapes_pipes():
    rows = [peers_report.Row("snapshot (rows/s)", 20_000, 60_000, "rows/s", "higher"),
            peers_report.Row("copy against pg_dump | psql", 500_000, 250_000, "rows/s", "higher"),
            peers_report.Row("CPU s per 1M rows", 40.0, 10.0, "s", "lower")]
    text = peers_report.markdown(rows, ["machine: 2 CPUs, load average 1.00 1.00 1.00"], ["a note"])
    assert "| snapshot (rows/s) | 20,000 rows/s | 60,000 rows/s | 3.00× | higher |" in text
    assert "pg_dump \\| psql | 500,000 rows/s | 250,000 rows/s | 0.50× |" in text
    assert "| CPU s per 1M rows | 40.0 s | 10.0 s | 0.25× | lower |" in text
    assert "load average 1.00" in text and "- a note" in text


def test_every_debezium_setting_is_listed_and_no_password():
    listed = "\n".join(peers_report.markdown([], [], []).splitlines())
    for settings in (connect.WORKER, connect.SOURCE, connect.SINK):
        for key, value in settings.items():
            assert f"{key}={value}" in listed
    assert "password" not in listed


def test_the_versions_are_the_pinned_ones():
    pom = jars.POM.read_text()
    line = peers_report.versions()
    for prop in ("debezium.version", "debezium.jdbc.version", "connect.version"):
        pinned = re.search(rf"<{re.escape(prop)}>([^<]+)</", pom)[1]
        assert pinned in line, prop
    assert "?" not in line


def test_connect_settings_files_are_private(tmp_path):
    written = connect._properties(tmp_path / "c.properties", {"database.password": "s3cret"})
    assert written.read_text() == "database.password=s3cret\n"
    assert stat.S_IMODE(written.stat().st_mode) == 0o600


def test_the_chart_is_written_beside_the_report_and_linked(tmp_path):
    rows = [peers_report.Row("live (rows/s)", 5_000, 20_000, "rows/s", "higher"),
            peers_report.Row("copy (rows/s)", 9e5, 3e5, "rows/s", "higher", "pg_dump | psql"),
            peers_report.Row("p99 (ms)", 40.0, 80.0, "ms", "lower"),
            peers_report.Row("not measured", None, 3.0, "s", "lower")]
    path = peers_report.write(tmp_path, rows, ["header"], [])
    text = path.read_text()
    assert "(peers.png)" in text
    assert (tmp_path / "peers.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| not measured | — | 3.0 s | — | lower |" in text
    assert "| copy (rows/s) | 900,000 rows/s | 300,000 rows/s | 0.33× | higher |" in text


def test_no_chart_without_a_figure_of_both_sides(tmp_path):
    path = peers_report.write(tmp_path, [peers_report.Row("x", None, 1.0, "s", "lower")], [], [])
    assert "peers.png" not in path.read_text() and not (tmp_path / "peers.png").exists()


def test_the_parts_are_checked_and_skip_pg2pg_is_one_of_them():
    args = peers._arguments(["--rows", "100", "--skip-pg2pg"])
    assert args.parts == {"capture", "live", "latency"} and args.changes == 100
    assert peers._arguments(["--parts", "live", "--changes", "0"]).parts == {"live"}
    with pytest.raises(argparse.ArgumentTypeError, match="unknown part.*foo"):
        peers._parts("live,foo")


def test_a_row_id_is_read_from_either_tools_key():
    key = json.dumps({"schema": {"type": "struct"}, "payload": {"id": 4242}}).encode()
    assert connect.key_id(key) == 4242
    assert avro_id(b"\x00\x00\x00\x00\x07" + bytes([0xA4, 0x42])) == 4242


def test_a_bar_is_green_where_bottler_is_better_and_names_the_peer():
    bars = peers_report.chart_figures([
        peers_report.Row("rate", 100.0, 300.0, "rows/s", "higher"),
        peers_report.Row("cost", 10.0, 30.0, "s", "lower"),
        peers_report.Row("floor", 900.0, 300.0, "rows/s", "higher", "pg_dump | psql")])
    assert [round(b.value, 2) for b in bars] == [3.0, 3.0, 0.33]
    assert [b.target.met(b) for b in bars] == [True, False, False]
    assert bars[2].name.endswith("pg_dump | psql 900 rows/s, bottler 300 rows/s (higher is better)")
