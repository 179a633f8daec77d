"""The conformance adapter for the warehouse materializer (see tests/test_conformance.py): a
:class:`DeltaSink` on a fresh directory, its tables read back with delta-rs."""

from __future__ import annotations

from collections.abc import Sequence

from materializers.core import TableId
from materializers.warehouse.delta import open_table
from materializers.warehouse.sink import DeltaSink, table_path


def rows(sink: DeltaSink, table: TableId, columns: Sequence[str]) -> list[tuple]:
    delta = open_table(table_path(sink.root, table))
    if delta is None:
        return []
    data = delta.to_pyarrow_table(columns=[c for c in columns
                                           if c in delta.schema().to_arrow().names]).to_pylist()
    return [tuple(row.get(c) for c in columns) for row in data]


def adapter(request, cleanup):
    from tests.support.conformance import Adapter

    tmp = request.getfixturevalue("tmp_path")
    count = iter(range(1_000_000))

    def make() -> DeltaSink:
        return DeltaSink(tmp / f"warehouse{next(count)}")

    def reopen(old: DeltaSink) -> DeltaSink:
        old.close()  # the process died: its unflushed batch is gone with it
        return DeltaSink(old.root)

    return Adapter(
        make, reopen,
        lambda sink, table, columns: {(row[0],): row for row in rows(sink, table, columns)},
        lambda sink, table, columns: sorted(rows(sink, table, columns)),
    )
