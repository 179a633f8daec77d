"""The target-Postgres replica: a live copy of the source tables in another PostgreSQL database."""

from common import lazy

DEFAULT_GROUP = "bottler-postgres"  # the replica's consumer group, the key of its offsets
# How the replica's sessions show in pg_stat_activity: the cutover waits for them to be gone
# before changing the target's schema (bottler/migrate/cutover.py).
APPLICATION_NAME = "bottler replica"
# 8 kB pages per range a seed's stream copies at most: 512 MB, seconds to copy. Each range costs
# two psql processes, their connections and a commit (about 30 ms): with ranges of 16 MB the
# copy of 1M rows took a fifth longer than with one range per worker (docs/migration.md).
SEED_CHUNK_PAGES = 65536

__getattr__ = lazy.exports(__name__, {
    "PostgresSink": "materializers.postgres.sink",
})

__all__ = ["PostgresSink"]
