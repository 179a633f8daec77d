"""A setting's command-line face, declared with the setting itself.

A settings field (common/config.py) carries its flag in its annotation, the way typer's own
`Annotated` options do:

    slot: Annotated[str, Flag("--slot", "-s", help="Replication slot name")] = "bottler"

and from that one declaration come the option (common/options.py builds the typer parameter),
its environment variable (`BOTTLER_SLOT`, or the field's `env(...)` alias), its config-file key
(the field's name), its default and the default and variable shown in `--help`. docs/
configuration.md is checked against the same declarations (tests/test_docs_reference.py).

A field may carry several flags: `kafka` is set by `--broker` and `-C` (the shorthands of
common/config.py), each with its own parameter (`param`) and variable (`env`). A field without a
flag is a config-file and environment setting only (the capture's `table_partitions`)."""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined


@dataclass(frozen=True, init=False)
class Flag:
    """The option of a settings field. ``shown`` is the default as the help says it, for a
    setting whose default the field cannot say (None meaning "computed"); ``param`` and ``env``
    are for a shorthand flag whose parameter and variable are not the field's."""

    names: tuple[str, ...]
    help: str
    param: str | None = None
    shown: str | None = None
    env: str | None = None
    metavar: str | None = None

    def __init__(self, *names: str, help: str, **texts: str | None):
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "help", help)
        for name, value in texts.items():
            if name not in self.__dataclass_fields__:
                raise TypeError(f"Flag has no {name}")
            object.__setattr__(self, name, value)

    def but(self, *names: str, **changes: str | None) -> Flag:
        """This flag with other names or texts (one command's spelling of a shared setting)."""
        texts = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "names"}
        return Flag(*(names or self.names), **{**texts, **changes})

    @property
    def long(self) -> str:
        return next((n for n in self.names if n.startswith("--")), self.names[0])


@dataclass(frozen=True)
class Option:
    """One option of a command, as its settings class declares it."""

    field: str
    flag: Flag
    info: FieldInfo

    @property
    def param(self) -> str:
        return self.flag.param or self.field

    @property
    def env(self) -> str:
        return self.flag.env or env_names(self.field, self.info)[0]

    @property
    def default(self) -> str | None:
        """The default as the help and the reference show it, if there is one to show."""
        if self.flag.shown is not None:
            return self.flag.shown
        value = self.info.default
        if value is PydanticUndefined or value is None or value is False or value in ([], {}, ""):
            return None
        return f"{value:g}" if isinstance(value, float) else str(value)

    @property
    def kind(self) -> type:
        """The parameter's type on the command line: a switch, a repeatable option, or one
        value that typer parses (the settings check the rest: literals, bounds)."""
        if self.flag.metavar == "PROP=VALUE":
            return list[str]
        if self.flag.param:  # a shorthand: one value
            return str
        hint = _bare(self.info.annotation)
        origin = typing.get_origin(hint)
        if hint is bool:
            return bool
        if origin in (list, tuple, dict) or hint in (list, dict):
            return list[str]
        if origin is Literal:
            return str
        return hint if hint in (int, float, Path) else str


def declared(info: FieldInfo) -> list[Flag]:
    """The flags a field declares (none: a key and a variable only)."""
    return [m for m in info.metadata if isinstance(m, Flag)]


def options(cls: type) -> list[Option]:
    """The options of settings class ``cls``: required settings first, then the clients'
    (broker, registry, prefix), the command's own, and the metrics endpoint."""
    found = [Option(name, flag, info) for name, info in cls.model_fields.items()
             for flag in declared(info)]
    return sorted(found, key=_place)


_CLIENTS = ("kafka", "schema_registry", "topic_prefix")


def _place(option: Option) -> int:
    if option.info.is_required():
        return 0
    if option.field in _CLIENTS:
        return 1 + _CLIENTS.index(option.field)
    return 5 if option.field.startswith("metrics_") else 4


def env_names(field: str, info: FieldInfo) -> list[str]:
    """The environment variables of a setting, the documented one first."""
    if isinstance(info.validation_alias, AliasChoices):
        return [c for c in info.validation_alias.choices if isinstance(c, str)]
    return [f"BOTTLER_{field.upper()}"]


def flag_of(cls: type, field: str) -> str:
    """The flag that sets ``field`` (its long spelling; the properties' -C and -R), if any."""
    info = cls.model_fields.get(field)
    found = declared(info) if info is not None else []
    if not found:
        return ""
    spelled = found[-1]  # kafka, schema_registry: their property flags come last
    return _SHORT.get(spelled.param or "", spelled.long)


_SHORT = {"kafka_config": "-C", "registry_config": "-R"}  # the spelling users know them by


def _bare(hint: Any) -> Any:
    """``hint`` without None and Annotated."""
    if typing.get_origin(hint) is typing.Annotated:
        hint = typing.get_args(hint)[0]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else str
    return hint
