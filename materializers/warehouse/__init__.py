"""The warehouse load: a PySpark job merging the table topics into Delta Lake tables
(docs/warehouse.md). ``DeltaSink`` is the Sink it writes through (usable by the consumer loop
too); the job itself is ``materializers.warehouse.job.WarehouseJob``."""

from materializers.warehouse.sink import DeltaSink

__all__ = ["DeltaSink"]
