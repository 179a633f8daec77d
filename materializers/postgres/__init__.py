"""The target-Postgres replica: a live copy of the source tables in another PostgreSQL database."""

from common import lazy

DEFAULT_GROUP = "bottler-postgres"  # the replica's consumer group, the key of its offsets
# How the replica's sessions show in pg_stat_activity: the cutover waits for them to be gone
# before changing the target's schema (bottler/migrate/cutover.py).
APPLICATION_NAME = "bottler replica"

__getattr__ = lazy.exports(__name__, {
    "PostgresSink": "materializers.postgres.sink",
})

__all__ = ["PostgresSink"]
