"""The capture: PostgreSQL's changes into Kafka topics, a consistent snapshot first.

Its rooms, in the order one change travels through them:

- ``source/``: connecting to the database, its catalogs, the publications and the slot.
- ``snapshot/``: the tables copied inside the slot's exported snapshot, and the incremental
  snapshots interleaved with the stream (asked for by ``bottler capture snapshot``).
- ``stream/``: the slot's pgoutput messages decoded, each table's codec kept up with DDL, and
  the loop that hands each change on.
- ``publish/``: a row encoded, sent to Kafka (or, refused, to its dead letter), and the WAL
  position confirmed once Kafka acknowledged it.
- ``setup/``: topics, progress records, and the undo of a start that failed.
- ``health/``: the slot's retained WAL, a slot PostgreSQL gave up, the metrics.

``run.py`` takes a capture from start to finish through them; ``cli.py`` and ``settings.py``
are its command line and settings.
"""
