"""Optional HTTP basic authentication of the registry, as Confluent's answers it: without the
right credentials every request gets 401 with error_code 401.

Credentials are `user:password` lines (blank lines and `#` comments ignored), from a file
(`--users-file`, BOTTLER_REGISTRY_USERS_FILE; keep it mode 600) or from BOTTLER_REGISTRY_USERS
itself. Never from the command line, where every user of the machine can read them (ps)."""

from __future__ import annotations

import base64
import binascii
import hmac
from pathlib import Path

from common.errors import BottlerError
from common.files import read_text

REALM = "SchemaRegistry"


def parse_users(text: str, where: str) -> dict[str, str]:
    users = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, password = line.partition(":")
        if not sep or not user or not password:
            raise BottlerError(f"line {number} of {where} is not user:password",
                               "write one user:password per line")
        users[user] = password
    return users


def load_users(path: Path | None, inline: str | None) -> dict[str, str]:
    """The users of a file and of the BOTTLER_REGISTRY_USERS text; empty: no authentication."""
    users = {}
    if path is not None:
        text = read_text(path, "the registry's users file",
                         "check --users-file (BOTTLER_REGISTRY_USERS_FILE)")
        users |= parse_users(text, str(path))
    if inline:
        users |= parse_users(inline, "BOTTLER_REGISTRY_USERS")
    if (path is not None or inline) and not users:
        raise BottlerError("the registry's users are empty: every request would be refused",
                           "give at least one user:password line")
    return users


def authorized(header: str | None, users: dict[str, str]) -> bool:
    """Whether an Authorization header names a user with the right password."""
    scheme, _, encoded = (header or "").partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(
            ":")
    except (binascii.Error, UnicodeDecodeError):
        return False
    expected = users.get(user)
    # compared in constant time, and a missing user costs the same as a wrong password
    return bool(sep) and hmac.compare_digest((expected or "\0").encode(), password.encode()) \
        and expected is not None
