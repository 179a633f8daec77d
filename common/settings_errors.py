"""Invalid settings as one line: each problem named by its flag and key, with the hint that
helps (librdkafka's or the registry client's reference, the command's --help, the file)."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, ValidationError

from common.errors import BottlerError
from common.flags import env_names, flag_of

LIBRDKAFKA_CONFIG_DOC = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"
REGISTRY_CONFIG_DOC = ("https://docs.confluent.io/platform/current/clients/confluent-kafka-python"
                       "/html/index.html#schemaregistryclient")


def invalid(cls: type, exc: ValidationError, path: Any) -> BottlerError:
    errors = exc.errors()
    problems = "; ".join(_problem(cls, e) for e in errors)
    where = {e["loc"][0] for e in errors if e["loc"]}
    hint = f"see `{command_path()} --help` for the accepted values"
    if "kafka" in where:
        hint = f"Kafka client properties are librdkafka's, see {LIBRDKAFKA_CONFIG_DOC}"
    elif "schema_registry" in where:
        hint = f"registry client properties are SchemaRegistryClient's, see {REGISTRY_CONFIG_DOC}"
    if path:
        hint += f"; check {path}"
    return BottlerError(f"invalid settings: {problems}", hint)


def _problem(cls: type, error: dict) -> str:
    """One problem as `--flag (key): message, got value` (never a secret's value)."""
    loc = [str(p) for p in error["loc"]]
    field = loc[0] if loc else "settings"
    for name, info in cls.model_fields.items():  # an environment variable's name: its setting
        alias = info.validation_alias
        if isinstance(alias, AliasChoices) and field in alias.choices:
            field = name
    # a key no flag sets is named as it is; without a command line
    # (python -m schemas.registry_server) as the flag its name would be
    flag = flag_of(cls, field) or ("" if _context() else "--" + field.replace("_", "-"))
    name = f"{flag} ({field})" if flag else field
    if loc[1:]:
        name += "." + ".".join(loc[1:])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown setting"
    elif error["type"] == "missing":
        info = cls.model_fields.get(field)
        envs = env_names(field, info) if info is not None else []
        message = "required" + (f", or set {envs[0]}" if envs else "")
    elif field not in cls.secret_fields and isinstance(error.get("input"), str | int | float):
        message += f", got {error['input']!r}"
    return f"{name}: {message}"


def command_path() -> str:
    ctx = _context()
    return ctx.command_path if ctx else "bottler"


def _context():
    """The command line's context while a command runs (typer carries its own click)."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:  # a typer on the click package
        from click import get_current_context
    return get_current_context(silent=True)
