"""Schema evolution rules (Confluent's compatibility levels) on top of avro.compatibility.

The reader/writer check itself is Apache Avro's; this module only decides which pairs to check
for a level and turns the results into messages a person can act on.
"""

from collections.abc import Sequence
from functools import lru_cache

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

DEFAULT_LEVEL = "BACKWARD"
LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)


class InvalidSchema(ValueError):
    """The text is not a valid Avro schema."""


@lru_cache(maxsize=4096)
def parse(text: str) -> avro.schema.Schema:
    """Parse Avro schema text; cached because stored versions are re-checked on every register."""
    try:
        return avro.schema.parse(text)
    except Exception as exc:  # avro raises assorted exception types on malformed input
        raise InvalidSchema(f"Invalid Avro schema: {exc}") from exc


def reader_problems(reader: avro.schema.Schema, writer: avro.schema.Schema) -> list[str]:
    """Why data written with `writer` cannot be read with `reader`; empty when it can."""
    # A fresh checker per pair: its memo is keyed by object identity.
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is not SchemaCompatibilityType.incompatible:
        return []
    kinds = ", ".join(sorted({kind.value for kind in result.incompatibilities}))
    where = ", ".join(sorted(result.locations))
    details = "; ".join(sorted(result.messages))
    return [f"{kinds} at {where}: {details}"]


def check(
    level: str,
    new: avro.schema.Schema,
    existing: Sequence[tuple[int, avro.schema.Schema]],
) -> list[str]:
    """Problems with adding `new` after `existing` ((version, schema) pairs, oldest first).

    BACKWARD: the new schema reads data written with the old one (consumers upgrade first).
    FORWARD: the old schema reads data written with the new one (producers upgrade first).
    FULL: both. Plain levels compare with the latest version, *_TRANSITIVE with every version.
    """
    if level not in LEVELS:
        raise ValueError(f"unknown compatibility level {level!r}")
    if level == "NONE" or not existing:
        return []
    against = existing if level.endswith("_TRANSITIVE") else existing[-1:]
    base = level.removesuffix("_TRANSITIVE")
    problems = []
    for version, old in reversed(against):
        if base in ("BACKWARD", "FULL"):
            problems += [
                f"new schema cannot read data written with version {version}: {p}"
                for p in reader_problems(new, old)
            ]
        if base in ("FORWARD", "FULL"):
            problems += [
                f"version {version} cannot read data written with the new schema: {p}"
                for p in reader_problems(old, new)
            ]
    return problems
