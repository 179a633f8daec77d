"""The target-Postgres replica: a live copy of the source tables in another PostgreSQL database."""

from materializers.postgres.sink import PostgresSink

__all__ = ["PostgresSink"]
