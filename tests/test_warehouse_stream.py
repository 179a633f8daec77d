"""The streaming query's offsets (materializers/warehouse/stream.py) without Spark: where a batch
ends against the watermarks, the read limit and availableNow's target, and a batch's end offsets
read from Spark's offset log."""

from __future__ import annotations

import json

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from materializers.warehouse.stream import Marks, batch_ends


class Watermarks(Marks):
    """Marks whose watermarks are given (the broker's answer, or None: it cannot say now)."""

    def __init__(self, marks, start=None, cap=10):
        super().__init__({"bootstrap": "unused:9092", "start": json.dumps(start or {}),
                          "max": str(cap)}, discover=lambda _consumer: [])
        self.marks = marks

    def _latest(self):
        return self.marks


def test_a_trigger_with_nothing_new_leaves_the_offsets_where_they_are():
    marks = Watermarks({"t:0": 5, "t:1": 7}, start={"t:0": 5, "t:1": 7})
    start = marks.initialOffset()
    assert start == {"t:0": 5, "t:1": 7}
    assert marks.latestOffset(start, marks.getDefaultReadLimit()) == start  # no batch
    marks.marks = None  # the broker restarting
    assert marks.latestOffset(start, marks.getDefaultReadLimit()) == start


def test_a_batch_ends_at_the_watermark_at_most_the_read_limit_past_the_last_end():
    marks = Watermarks({"t:0": 25, "t:1": 3, "u:0": 4}, start={"t:0": 5, "t:1": 7}, cap=10)
    start = marks.initialOffset()
    assert marks.latestOffset(start, ReadMaxRows(10)) == {
        "t:0": 15,  # capped
        "t:1": 3,  # the log lost its end: the batch reads it again (job.py)
        "u:0": 4}  # a new partition, from 0
    assert marks.latestOffset(start, ReadAllAvailable())["t:0"] == 25  # no limit: all of it


def test_available_now_stops_at_the_watermarks_of_the_start():
    marks = Watermarks({"t:0": 12})
    marks.prepareForTriggerAvailableNow()
    marks.marks = {"t:0": 50}  # written after the start
    first = marks.latestOffset({}, ReadMaxRows(10))
    assert first == {"t:0": 10}
    assert marks.latestOffset(first, ReadMaxRows(10)) == {"t:0": 12}
    assert marks.latestOffset({"t:0": 12}, ReadMaxRows(10)) == {"t:0": 12}  # done: the query ends


def test_a_batchs_end_offsets_come_from_the_offset_log(tmp_path):
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "3").write_text(
        'v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'
        '{"shop.orders:0":17,"shop._bottler.truncate:0":2}')
    assert batch_ends(tmp_path, 3) == {("shop.orders", 0): 17, ("shop._bottler.truncate", 0): 2}
