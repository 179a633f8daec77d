"""A command made from its settings class (common/options.py): one declaration per setting gives
the flag, the variable, the key and the default, and `--help` shows the default and the variable
the declaration says (not swallowed as rich markup)."""

from __future__ import annotations

from typing import Annotated

import typer
from pydantic import Field
from typer.testing import CliRunner

from bottler.cli import app
from common.config import Settings
from common.flags import Flag
from common.options import settings_command


class Toy(Settings):
    size: Annotated[int, Flag("--size", "-n", help="How many")] = Field(3, ge=1)
    name: Annotated[str | None, Flag("--name", help="Who", shown="nobody")] = None
    loud: Annotated[bool, Flag("--loud", help="Shout.")] = False
    key_only: int = 0  # no flag: the file and the environment only


def toy_app(seen: list[Toy]) -> typer.Typer:
    toy = typer.Typer(add_completion=False)

    @toy.command()
    @settings_command
    def run(s: Toy, word: str = typer.Argument("hi")) -> None:
        seen.append(s)
        typer.echo(word)

    return toy


def test_flags_environment_and_defaults_in_their_order(monkeypatch) -> None:
    seen: list[Toy] = []
    monkeypatch.setenv("BOTTLER_SIZE", "7")
    monkeypatch.setenv("BOTTLER_KEY_ONLY", "2")
    result = CliRunner().invoke(toy_app(seen), ["--loud", "there"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "there"
    s = seen[0]
    assert (s.size, s.name, s.loud, s.key_only) == (7, None, True, 2)
    assert s.flags == {"loud"}
    result = CliRunner().invoke(toy_app(seen), ["-n", "9"])
    assert seen[1].size == 9 and seen[1].flags == {"size"}


def test_the_options_are_the_declared_ones() -> None:
    command = typer.main.get_command(toy_app([]))
    options = {p.name: p.opts for p in command.params}
    assert options == {"word": ["word"], "size": ["--size", "-n"], "name": ["--name"],
                       "loud": ["--loud"], "config": ["--config"]}


def test_help_shows_the_declared_default_and_variable() -> None:
    result = CliRunner().invoke(app, ["capture", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "Replication slot name [default: bottler] [env: BOTTLER_SLOT]" in result.output
    assert "Source database DSN [env: BOTTLER_PG_DSN]" in result.output
    result = CliRunner().invoke(app, ["materialize", "warehouse", "--help"],
                                env={"COLUMNS": "200"})
    assert "Spark master [default: local[2]] [env: BOTTLER_SPARK_MASTER]" in result.output
