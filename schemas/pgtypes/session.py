"""The session settings under which PostgreSQL's text output has exactly one format: every
capture connection (and the replica's) uses them."""

from __future__ import annotations

#: Settings every capture connection uses, so that text output has exactly one format.
SESSION_SETTINGS: dict[str, str] = {
    "DateStyle": "ISO",
    "IntervalStyle": "iso_8601",
    "TimeZone": "UTC",
    "extra_float_digits": "3",
    "bytea_output": "hex",
    "lc_monetary": "C",
}


def session_statements() -> list[str]:
    """``SET`` statements applying :data:`SESSION_SETTINGS` on an open connection."""
    return [f"SET {name} TO '{value}'" for name, value in SESSION_SETTINGS.items()]


def libpq_options() -> str:
    """:data:`SESSION_SETTINGS` as a libpq ``options`` value (``-c name=value ...``), for
    connections where running ``SET`` first is awkward (e.g. replication connections)."""
    return " ".join(f"-c {name}={value}" for name, value in SESSION_SETTINGS.items())
