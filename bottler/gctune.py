"""Garbage-collector settings for the hot loops.

The capture and the materializers allocate a few short-lived objects per row and keep few (a
batch at most): with CPython's default thresholds the young generation is collected every 700
allocations, and each collection walks the long-lived start-up objects again. Freezing those and
collecting less often measured 12-15 % more rows/s in the capture; memory stays bounded because
rows do not outlive their message or batch.
"""

import gc


def tune() -> None:
    gc.collect()
    gc.freeze()  # start-up objects (modules, codecs, clients) leave the collector's view
    gc.set_threshold(50_000, 20, 20)
