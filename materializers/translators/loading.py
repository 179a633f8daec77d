"""Finding a translator by name: an entry point of the ``bottler.translators`` group, or
``module:attribute``. The attribute is a :class:`Translator`, or a function without arguments
that returns one."""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points

from common.errors import BottlerError
from materializers.translators.api import Translator

GROUP = "bottler.translators"


def installed() -> dict[str, str]:
    """Entry point name -> its ``module:attribute``, for every installed translator."""
    return {ep.name: ep.value for ep in entry_points(group=GROUP)}


def load(name: str) -> Translator:
    if ":" in name:
        obj = _import(name)
    else:
        found = [ep for ep in entry_points(group=GROUP) if ep.name == name]
        if not found:
            known = ", ".join(sorted(installed())) or "none installed"
            raise BottlerError(
                f"no translator named {name!r} (entry points of {GROUP}: {known})",
                "give an installed name, or module:attribute of a Translator",
            )
        obj = _import(found[0].value)
    if not isinstance(obj, Translator) and callable(obj):
        obj = obj()
    if not isinstance(obj, Translator):
        raise BottlerError(
            f"{name} is a {type(obj).__name__}, not a Translator",
            "point at a materializers.translators.Translator or a function returning one",
        )
    return obj


def _import(spec: str) -> object:
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BottlerError(f"cannot import {module_name}: {exc}",
                           "is the module installed, or on PYTHONPATH?") from None
    obj: object = module
    for part in attribute.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise BottlerError(f"{module_name} has no {attribute}") from None
    return obj
