"""Commands made from their settings: `settings_command` gives a command the options its settings
class declares (common/flags.py) and calls it with the settings read (common/config.py: flags >
BOTTLER_* environment > YAML file > defaults). Here too are the flags the views share, so a flag
has the same name, setting and help in every command.

Every option's typer default is None ("not given"): the setting's default lives in its field, and
the help shows it and the variable. --on-poison is checked by the settings and by the core
(materializers.core.poison.checked)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape

from common import flags
from common.config import (
    CONFIG_ENV,
    KafkaSettings,
    RegistrySettings,
    Settings,
    TopicPrefixSettings,
    load,
)
from common.flags import Flag

CONFIG_HELP = escape(f"YAML file of settings; its keys are the settings' names "
                     f"[env: {CONFIG_ENV}]")


def topics(verb: str) -> Flag:
    return Flag("--topic", "--topics", help=f"Table topic to {verb} (repeatable)",
                shown="the table topics the capture of the prefix owns")


TOPICS = topics("read")
GROUP_ID = Flag("--group-id", "-g", help="Consumer group; also the key of the stored offsets.")
BATCH_SIZE = Flag("--batch-size", help="Messages per batch.")
ONCE = Flag("--once", help="Stop once caught up.")
JOIN_GROUP = Flag(
    "--join-group", help="Share the table topics' partitions with the other instances of this "
    "view in its consumer group: start several, and a rebalance moves partitions as they come "
    "and go")
INSTANCE_ID = Flag(
    "--instance-id", help="With --join-group: this instance's stable name in the group (static "
    "membership: restarted under the same name, it takes its partitions back without a "
    "rebalance)")
ON_POISON = Flag("--on-poison", help="dead-letter or stop")


class ViewSettings(KafkaSettings, RegistrySettings, TopicPrefixSettings):
    """What every materializer reads its topics with (`materialize *`, `reindex`, `translate`);
    each command adds its own settings (topics, batch_size, once, metrics...)."""

    on_poison: Annotated[Literal["dead-letter", "stop"], ON_POISON] = "dead-letter"


def settings_command(func: Callable) -> Callable:
    """``func`` as a typer command: its parameter annotated with a settings class becomes the
    class's options and --config, and it is called with the settings read. A group's callback
    (one with a typer.Context) is given None when a subcommand runs: the group's settings are
    read only when it runs itself."""
    hints = typing.get_type_hints(func, include_extras=True)
    own, target = [], None
    for param in inspect.signature(func).parameters.values():
        hint = hints.get(param.name, param.annotation)
        if isinstance(hint, type) and issubclass(hint, Settings):
            target = param.name, hint
        else:
            own.append(param.replace(annotation=hint))
    assert target, f"{func.__name__} takes no settings"
    name, cls = target
    options = flags.options(cls)
    params = [*own, *(_parameter(o) for o in options),
              inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, annotation=Path | None,
                                default=typer.Option(None, "--config", help=CONFIG_HELP,
                                                     show_default=False))]

    context = next((p.name for p in own if p.annotation is typer.Context), None)

    def command(**given):
        ctx = given.get(context)
        flagged = {p: given.pop(p) for p in [*(o.param for o in options), "config"]}
        settings = None if ctx and ctx.invoked_subcommand else load(cls, flagged)
        return func(**given, **{name: settings})

    for attribute in ("__module__", "__name__", "__qualname__", "__doc__"):
        setattr(command, attribute, getattr(func, attribute))
    command.__signature__ = inspect.Signature(params)
    command.__annotations__ = {p.name: p.annotation for p in params}
    return command


def _parameter(option: flags.Option) -> inspect.Parameter:
    """The typer parameter of one option: the declared help, then the default and the variable
    (escaped: typer reads the help as rich markup)."""
    kind = option.kind
    shown = f" [default: {option.default}]" if option.default is not None else ""
    help = escape(f"{option.flag.help}{shown} [env: {option.env}]")
    extra = {"metavar": option.flag.metavar} if option.flag.metavar else {}
    return inspect.Parameter(
        option.param, inspect.Parameter.KEYWORD_ONLY,
        annotation=kind if kind is bool else kind | None,
        default=typer.Option(False if kind is bool else None, *option.flag.names, help=help,
                             show_default=False, **extra))


def serve_metrics(port: int | None, host: str) -> None:
    """Serve the process's Prometheus metrics on --metrics-host:--metrics-port, if a port was
    given."""
    if port:
        from prometheus_client import start_http_server

        start_http_server(port, addr=host)
