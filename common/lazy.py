"""Lazy package exports: a materializer's package should not load its target's libraries
(pyarrow and delta-rs, the search client) into the processes that only import a name of it:
each costs tens of MB of memory and start-up time."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def exports(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` (PEP 562) that imports each name of ``where`` (name -> module)
    on first use."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    return __getattr__
