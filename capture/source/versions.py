"""What the capture asks of each PostgreSQL version, decided from the server's
``server_version_num``, never assumed (docs/capture.md, "PostgreSQL versions")."""

from __future__ import annotations

from common.errors import BottlerError

__all__ = ["OLDEST_SUPPORTED", "check_supported", "check_standby_decoding", "publishes_generated",
           "unsupported"]

OLDEST_SUPPORTED = 150000  # PostgreSQL 15
GENERATED_COLUMNS = 180000  # publish_generated_columns = stored
STANDBY_DECODING = 160000  # logical decoding on a hot standby


def unsupported(version: int) -> BottlerError | None:
    """The error of a source too old for the capture, or None."""
    if version >= OLDEST_SUPPORTED:
        return None
    return BottlerError(
        f"the source runs PostgreSQL {version // 10000}; bottler supports PostgreSQL "
        f"{OLDEST_SUPPORTED // 10000} and later",
        f"upgrade the source to PostgreSQL {OLDEST_SUPPORTED // 10000} or later (docs/capture.md "
        "lists what bottler uses of each version)",
    )


def check_supported(version: int) -> None:
    if error := unsupported(version):
        raise error


def publishes_generated(asked: str, version: int) -> bool:
    """Whether the capture's publications publish stored generated columns: ``asked`` is
    --generated-columns (auto: where the server can, PostgreSQL 18 on)."""
    if asked == "on" and version < GENERATED_COLUMNS:
        raise BottlerError(
            f"--generated-columns on needs PostgreSQL 18 (the source runs {version // 10000}): "
            "older servers never publish generated columns",
            "drop --generated-columns (or set it to auto or off); the views then lack the "
            "generated columns, which a replica can re-create as generated",
        )
    return asked == "on" or (asked == "auto" and version >= GENERATED_COLUMNS)


def check_standby_decoding(version: int) -> None:
    """A standby source decodes only from PostgreSQL 16 on."""
    if version < STANDBY_DECODING:
        raise BottlerError(
            f"the source is a standby of PostgreSQL {version // 10000}; logical decoding on a "
            f"standby needs PostgreSQL {STANDBY_DECODING // 10000} or later",
            "point --postgres at the primary (and drop --primary), or upgrade to PostgreSQL 16 "
            "or later (docs/operations.md, capture from a standby)",
        )
