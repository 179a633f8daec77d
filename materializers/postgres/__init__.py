"""The target-Postgres replica: a live copy of the source tables in another PostgreSQL database."""

from common import lazy

DEFAULT_GROUP = "bottler-postgres"  # the replica's consumer group, the key of its offsets

__getattr__ = lazy.exports(__name__, {
    "PostgresSink": "materializers.postgres.sink",
})

__all__ = ["PostgresSink"]
