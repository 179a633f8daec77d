"""The peers bench's report (tests/bench/peers_report.py: the table, the chart), its options
(tests/bench/peers.py), Connect's settings files and keys (tests/bench/connect.py), from
hand-made figures: no stack, no JVM."""

from __future__ import annotations

import argparse
import json
import re
import stat

import pytest

from compose import demo, jars
from tests.bench import connect, peers, peers_report, peers_shop
from tests.bench.latency import avro_id
from tests.bench.peers_capture import Shape, side_by_side


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
    listed = peers_report.markdown([], [], [])
    for settings in (connect.JSON, connect.WORKER, connect.SOURCE, connect.SINK):
        for key, value in settings.items():
            assert f"{key}={value}" in listed
    assert "password" not in listed


def test_the_versions_are_the_pinned_ones_and_name_the_format():
    pom = jars.POM.read_text()
    line = peers_report.versions("json")
    for prop in ("debezium.version", "debezium.jdbc.version", "connect.version"):
        pinned = re.search(rf"<{re.escape(prop)}>([^<]+)</", pom)[1]
        assert pinned in line, prop
    assert "?" not in line and "JSON converter" in line
    avro = peers_report.versions("avro")
    for prop in ("apicurio-converter.version", "apicurio.version"):
        assert re.search(rf"<{re.escape(prop)}>([^<]+)</", pom)[1] in avro, prop
    assert "?" not in avro and "JSON" not in avro


def test_the_format_chooses_the_converters_and_the_key_reader():
    assert peers._arguments([]).debezium_format == peers.FORMAT
    assert peers._arguments(["--debezium-format", "json"]).debezium_format == "json"
    with pytest.raises(SystemExit):
        peers._arguments(["--debezium-format", "protobuf"])
    assert connect.converters("json", "http://127.0.0.1:1") == connect.JSON
    avro = connect.converters("avro", "http://127.0.0.1:8081/apis/ccompat/v7")
    for side in ("key", "value"):
        assert avro[f"{side}.converter"] == connect.AVRO_CONVERTER
        assert avro[f"{side}.converter.apicurio.registry.url"] == (
            "http://127.0.0.1:8081/apis/registry/v2")
        assert avro[f"{side}.converter.apicurio.registry.headers.enabled"] == "false"
    with pytest.raises(ValueError, match="Apicurio"):  # our registry has no v2 API
        connect.converters("avro", "http://127.0.0.1:8081")
    assert connect.key_reader("avro") is avro_id and connect.key_reader("json") is connect.key_id


def test_every_avro_setting_is_listed_with_the_format_asked():
    listed = peers_report.markdown([], [], [], converter=connect.converters(
        "avro", "http://127.0.0.1:8081/apis/ccompat/v7"))
    assert "value.converter=" + connect.AVRO_CONVERTER in listed
    assert "JsonConverter" not in listed
    assert "org.apache.kafka.connect.json.JsonConverter" in peers_report.markdown([], [], [])


def test_the_shop_is_scaled_to_about_the_rows_asked_and_named_apart():
    assert peers_shop.scale(1_000_000) == 62 and peers_shop.scale(10) == 1
    assert abs(peers_shop.scale(1_000_000) * demo.ROWS - 1_000_000) < demo.ROWS
    shape = Shape("peers_shop", "shop: ", demo.TABLES, 100, peers_shop.again)
    dbz, ours = shape.topics()
    assert dbz[0] == "dbz_peers_shop.public.customers"
    assert ours[-1] == "bottler_peers_shop.order_items"
    assert len(peers_shop.AGAIN) == len(demo.TABLES)
    rows = capture_side_by_side("shop: ")
    assert rows and all(r.what.startswith("shop: ") for r in rows)


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
    assert args.parts == {"capture", "shop", "live", "latency"} and args.changes == 100
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


def capture_side_by_side(label: str) -> list[peers_report.Row]:
    run = peers_report.Run(10.0, 1000, 5.0, 100.0, from_line=200.0)
    return side_by_side(label, (run, run), (run, run))
