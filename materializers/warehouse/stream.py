"""The warehouse's micro-batches as a Spark Structured Streaming query: ``--once`` is
``trigger(availableNow=True)``, the continuous job a processing-time trigger, and
``foreachBatch`` runs each batch (the job's read, dedupe, stage and merge: job.py).

The stream's source (:class:`Marks`, a Python streaming data source) carries *offsets only*:
per topic-partition, where the next batch ends — the high watermark, at most ``max`` offsets past
where the last batch ended. Spark asks for it at every trigger, in its planner process; when
nothing is new the offsets do not move and Spark runs no batch and no job (an idle trigger is a
watermark request per partition). The rows are not read through the stream: a batch starts where
the Delta tables say their topics stand (the offsets recorded in their commits), which a
truncate's barrier or a log that lost its end can move *backwards*, and a streaming source's
batch always starts where the previous one ended. So the offsets in Delta stay the truth:
the query's checkpoint is a scratch directory of the run, and the stream's initial offsets are
what the tables recorded, read by the driver before the query starts.

``foreachBatch`` learns its batch's end offsets from the query's offset log (the checkpoint's
``offsets/<batch id>``: a version line, the batch's metadata, then the source's offsets).
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow

from common.kafka import reader_config
from materializers.core import watermarks
from materializers.core.changes import TopicPartition

log = logging.getLogger(__name__)

_names = itertools.count()


def key(tp: TopicPartition) -> str:
    return f"{tp[0]}:{tp[1]}"  # Kafka topic names hold no ':'


def parse(offsets: dict[str, int]) -> dict[TopicPartition, int]:
    out = {}
    for k, offset in offsets.items():
        topic, partition = k.rsplit(":", 1)
        out[(topic, int(partition))] = offset
    return out


def batch_ends(checkpoint: Path, batch_id: int,
               kafka: bool = False) -> dict[TopicPartition, int]:
    """The end offsets of batch ``batch_id``, from the query's offset log: this module's
    source's, or (``kafka``) Spark's Kafka source's (``{"topic": {"partition": end}}``)."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    if len(lines) < 3 or not lines[0].startswith("v"):
        raise RuntimeError(f"unexpected Spark offset log format in {checkpoint}/offsets/"
                           f"{batch_id}: {lines[:1]}")
    found = json.loads(lines[2])
    if kafka:
        return {(t, int(p)): end for t, ends in found.items() for p, end in ends.items()}
    return parse(found)


def ended(query: Any, failure: list[BaseException], name: str) -> None:
    """After a query stopped: raise what ended it, a batch's failure (``failure``, kept by
    ``foreachBatch``: a user's error is raised here, not through Spark's engine) or its own."""
    if failure:
        raise failure[0]
    if query.exception() is not None:
        raise RuntimeError(f"{name}: the streaming query failed: {query.exception()}")


class Marks(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"topic:partition": end}``; ``discover(consumer)`` lists the partitions."""

    def __init__(self, options: dict[str, str], discover: Callable[[Consumer], list]):
        from materializers.warehouse.source import from_option

        self.bootstrap = from_option(options["bootstrap"])
        self.start = json.loads(options["start"])
        self.cap = int(options["max"])
        self.discover = discover
        self.target: dict[str, int] | None = None
        self._consumer: Consumer | None = None

    def _latest(self) -> dict[str, int] | None:
        if self._consumer is None:
            self._consumer = Consumer(reader_config(self.bootstrap, "warehouse-planner"))
            self._marks = watermarks.Reader(self.bootstrap)
        try:
            partitions = self.discover(self._consumer)
        except KafkaException as exc:  # the broker restarting: as for its watermarks, a pause
            log.warning("warehouse: topics unknown for now: %s", exc.args[0].str())
            return None
        marks = watermarks.read(self._marks, partitions, "warehouse")
        return None if marks is None else {key(tp): high for tp, (_, high) in marks.items()}

    def initialOffset(self) -> dict:  # noqa: N802 - pyspark's names
        return self.start

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        while self.target is None:  # the broker restarting: the load waits for it
            self.target = self._latest()

    def getDefaultReadLimit(self) -> ReadMaxRows:  # noqa: N802
        return ReadMaxRows(self.cap)

    def latestOffset(self, start: dict, limit: Any) -> dict:  # noqa: N802
        latest = self.target if self.target is not None else self._latest()
        if latest is None:  # the watermarks cannot be read now: nothing new this time
            return start
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = dict(start)
        for k, high in latest.items():
            begin = start.get(k, 0)
            if high < begin:  # the log lost its end: the batch reads it again (job.py)
                end[k] = high
            elif high > begin:
                end[k] = min(high, begin + cap) if cap else high
        return end

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        return []  # offsets only: the batch reads the ranges itself

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        return iter(())

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()


def source(discover: Callable[[Consumer], list]) -> type[DataSource]:
    """A data source class, to register under its own name, whose stream is :class:`Marks`
    with ``discover`` (pickled with the class: the planner process runs the driver's own
    discovery)."""
    name = f"bottler_marks_{next(_names)}"

    class MarksSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return name

        def schema(self) -> str:
            return "topic string"

        def streamReader(self, schema: Any) -> Marks:  # noqa: N802
            return Marks(self.options, discover)

    return MarksSource
