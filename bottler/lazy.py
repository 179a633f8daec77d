"""Command groups whose commands' modules are imported only when one of them runs (or a help
lists them): every `bottler` process imported every command's module (the migration's, the
replica's, the views', 0.08 s of each start), though it runs one."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, MutableMapping

import click
import typer
from typer.core import TyperGroup

from common import extras


class LazyCommands(MutableMapping):
    """A group's commands by name (click's ``Group.commands``): those given as ``"module:name"``
    are made at their first lookup. Names are known without importing anything, so listing
    them, or suggesting one for a typo, loads nothing."""

    def __init__(self, commands: dict[str, click.Command], lazy: dict[str, str]):
        self.loaded = dict(commands)
        self.lazy = {name: target for name, target in lazy.items() if name not in commands}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self.loaded and name in self.lazy:
            self.loaded[name] = _command(name, self.lazy.pop(name))
        return self.loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self.lazy.pop(name, None)
        self.loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if self.lazy.pop(name, None) is None:
            del self.loaded[name]

    def __iter__(self) -> Iterator[str]:
        yield from self.loaded
        yield from list(self.lazy)

    def __len__(self) -> int:
        return len(self.loaded) + len(self.lazy)

    def __contains__(self, name: object) -> bool:
        return name in self.loaded or name in self.lazy


def lazy_group(commands: dict[str, str]) -> type[TyperGroup]:
    """A typer group class (``typer.Typer(cls=...)``) that also has ``commands``: name →
    ``"module:attribute"``, a Typer app or a command's function, with ``"@extra"`` after it
    for a command that needs an extra of the install (:func:`common.extras.needs`)."""

    class LazyGroup(TyperGroup):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.commands = LazyCommands(self.commands, commands)

    return LazyGroup


def _command(name: str, target: str) -> click.Command:
    where, _, extra = target.partition("@")
    module, _, attribute = where.partition(":")
    found: typer.Typer | Callable = getattr(importlib.import_module(module), attribute)
    if isinstance(found, typer.Typer):
        group = typer.main.get_group(found)
        group.name = name  # a group's name is where it is added (as typer's add_typer does)
        return group
    single = typer.Typer(add_completion=False)
    single.command(name)(extras.needs(extra, found) if extra else found)
    return typer.main.get_command(single)
