"""The install's optional parts (pyproject.toml's extras). The core install is the capture, the
replica, the translators and the registry; a command that needs an extra that is not installed
stops with one line naming the extra to install, not an ImportError from deep inside."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from common.errors import BottlerError
from common.settings_errors import command_path  # the running command's (typer's own click)

P = ParamSpec("P")
R = TypeVar("R")

DISTRIBUTION = "bottler-cdc"  # "bottler" on PyPI is an unrelated project

# extra -> the modules its commands import (tests/test_install.py checks them against
# pyproject.toml).
EXTRAS: dict[str, tuple[str, ...]] = {
    "search": ("urllib3", "orjson"),
    "warehouse": ("pyspark", "delta", "deltalake", "pyarrow", "pandas"),
}


class MissingExtra(BottlerError):
    """A command needs an extra of the install that is not there."""


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported (found without importing them: pyspark
    alone takes a second)."""
    return [module for module in EXTRAS[extra] if importlib.util.find_spec(module) is None]


def require(extra: str, command: str | None = None) -> None:
    """Raise :class:`MissingExtra` unless every module of ``extra`` is installed; the message
    names ``command``, by default the one running."""
    absent = missing(extra)
    if absent:
        raise MissingExtra(
            f"`{command or command_path()}` needs the {extra} extra "
            f"({', '.join(absent)} not installed): pip install '{DISTRIBUTION}[{extra}]'")


def needs(extra: str, command: Callable[P, R]) -> Callable[P, R]:
    """``command`` that first checks ``extra`` is installed (typer reads the wrapped
    signature)."""

    @functools.wraps(command)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        require(extra)
        return command(*args, **kwargs)

    checked.extra = extra  # type: ignore[attr-defined]  # what the image must install
    return checked
