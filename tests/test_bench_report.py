"""The benchmark report (tests/bench/report.py, charts.py) from hand-made figures: no stack."""

from __future__ import annotations

import struct
import zlib

from tests.bench.report import Figure, ScalePoint, Target, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _figures() -> list[Figure]:
    decode = Figure("decode ceiling, catch-up", 120_000, "rows/s", notes=["1M rows"])
    copy = Figure("postgres: COPY TO STDOUT", 1_400_000, "rows/s")
    return [
        decode,
        Figure("capture stream, catch-up", 96_000, "rows/s", ceiling=decode,
               target=Target(">=", 0.7, "ratio"), notes=["restart → Kafka", "CPU seconds"]),
        copy,
        Figure("capture snapshot, 2 workers", 140_000, "rows/s", ceiling=copy,
               target=Target(">=", 150_000)),
        Figure("latency commit → broker append, p99", 25.2, "ms", target=Target("<", 200)),
        Figure("a name | with a pipe", 3.0, "MB"),
    ]


def _scaling(figures: list[Figure]) -> list[ScalePoint]:
    stream = figures[1]
    return [
        ScalePoint("capture stream, catch-up", 10_000,
                   Figure(stream.name, 20_000, "rows/s",
                          ceiling=Figure("decode", 60_000, "rows/s"))),
        ScalePoint("capture stream, catch-up", 1_000_000, stream),
    ]


def _png_size(path) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk, its CRC checked."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path.name} is not a PNG"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    body = data[16:16 + length]
    (crc,) = struct.unpack(">I", data[16 + length:20 + length])
    assert zlib.crc32(kind + body) == crc, f"{path.name}: bad IHDR checksum"
    assert data.endswith(b"IEND\xaeB`\x82"), f"{path.name} is truncated"
    return struct.unpack(">II", body[:8])


def test_report_writes_the_table_notes_scaling_and_valid_charts(tmp_path):
    figures = _figures()
    out = tmp_path / "report"
    readme = write_report(out, figures, ["code: commit abc1234", "machine: 2 CPUs"],
                          _scaling(figures))

    text = readme.read_text()
    assert readme == out / "README.md"
    assert "- code: commit abc1234" in text
    assert "| # | figure | value | raw ceiling | ratio | target | verdict |" in text
    assert ("| 2 | capture stream, catch-up | 96,000 rows/s | 120,000 rows/s | 0.80× | "
            "≥ 0.70× | ✓ met |") in text
    assert ("| 4 | capture snapshot, 2 workers | 140,000 rows/s | 1,400,000 rows/s | 0.10× | "
            "≥ 150,000 | ✗ missed |") in text
    assert "| 5 | latency commit → broker append, p99 | 25.2 ms | — | — | < 200 | ✓ met |" in text
    assert "| 6 | a name \\| with a pipe | 3.0 MB | — | — | — | — |" in text
    assert "- [2] restart → Kafka" in text and "- [2] CPU seconds" in text
    assert "| capture stream, catch-up | 10,000 | 20,000 rows/s | 60,000 rows/s | 0.33× |" in text

    for name in ("ratios.png", "scaling.png", "latency.png"):
        assert f"]({name})" in text
        width, height = _png_size(out / name)
        assert width >= 600 and height >= 150, (name, width, height)


def test_report_without_scaling_or_latencies_leaves_their_charts_out(tmp_path):
    figures = _figures()[:4]
    readme = write_report(tmp_path, figures)

    text = readme.read_text()
    assert "## Scaling" not in text and "scaling.png" not in text
    assert "latency.png" not in text and not (tmp_path / "latency.png").exists()
    _png_size(tmp_path / "ratios.png")
