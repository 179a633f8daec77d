"""The warehouse load: a PySpark job merging the table topics into Delta Lake tables
(docs/warehouse.md). ``DeltaSink`` is the Sink it writes through (usable by the consumer loop
too); the job itself is ``materializers.warehouse.job.WarehouseJob``."""

from common import lazy

__getattr__ = lazy.exports(__name__, {
    "DeltaSink": "materializers.warehouse.sink",
})

__all__ = ["DeltaSink"]
