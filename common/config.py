"""One configuration system for every command: a command's settings are a pydantic-settings class
read from, highest first, its flags, `BOTTLER_*` environment variables and one YAML file
(`--config`, or `BOTTLER_CONFIG`), over the defaults. The file's keys are the settings' names,
the same in every command, so one file can serve several commands (a key another command has is
ignored; a key no command has is an error).

A command declares its settings as a subclass of `Settings` (mixing in `KafkaSettings`,
`RegistrySettings`, `MetricsSettings` for the clients it makes), gives each a typer option whose
parameter has the field's name and the default None, and calls `load(TheSettings, locals())`
first thing: a flag not given leaves the setting to the environment, the file or the default.

Client properties: `kafka` is librdkafka's configuration and `schema_registry` confluent-kafka's
SchemaRegistryClient configuration, given to the clients as they are. Shorthands, in every
source: `broker` is `kafka`'s `bootstrap.servers`, a string `schema_registry` is its `url`,
`kafka_config` and `registry_config` (the `-C` and `-R` flags) add properties. Sources merge
property by property, so `-C linger.ms=5` keeps the file's `sasl.password`."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from common.errors import BottlerError
from common.kafka import prefix_problem
from common.redact import MASK, is_secret_key, mask_properties, redact

CONFIG_ENV = "BOTTLER_CONFIG"  # the YAML file, when --config is not given
LIBRDKAFKA_CONFIG_DOC = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"
REGISTRY_CONFIG_DOC = ("https://docs.confluent.io/platform/current/clients/confluent-kafka-python"
                       "/html/index.html#schemaregistryclient")
DEFAULT_BROKER = "localhost:9092"
DEFAULT_REGISTRY = "http://localhost:8081"

# The shorthands' environment variables (the first is the documented one).
BROKER_ENV = ("BOTTLER_KAFKA", "BOTTLER_BROKER")
REGISTRY_ENV = ("BOTTLER_REGISTRY", "BOTTLER_SCHEMA_REGISTRY")
KAFKA_CONFIG_ENV = "BOTTLER_KAFKA_CONFIG"
REGISTRY_CONFIG_ENV = "BOTTLER_REGISTRY_CONFIG"
# The flag's parameter of a setting whose flag has another name (for error messages).
FLAG_PARAMS = {"kafka": "kafka_config", "schema_registry": "registry_config"}

_KNOWN_KEYS: set[str] = {"broker", "kafka_config", "registry_config"}  # every command's settings


def env(*names: str) -> AliasChoices:
    """A setting's environment variables when they are not BOTTLER_<FIELD>. Only prefixed names:
    an alias is read from the environment as it is, so a bare one (say BROKER) would pick up
    unrelated variables. Flags and the file use the field's name."""
    return AliasChoices(*names)


def _properties(value: Any) -> dict[str, str]:
    """Client properties as librdkafka and the registry client take them: strings, booleans as
    true/false (a YAML file may hold `enable.idempotence: true` or `linger.ms: 5`)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("must be a mapping of client properties (name: value)")
    return {str(k).strip(): (str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in value.items()}


def normalize(data: Mapping[str, Any]) -> dict[str, Any]:
    """One source's values with the shorthands folded into `kafka` and `schema_registry`."""
    data = dict(data)
    broker, extra = data.pop("broker", None), data.pop("kafka_config", None)
    if broker is not None or extra is not None:
        kafka = {**_loose(data.get("kafka")), **_loose(extra)}
        if broker is not None:
            kafka["bootstrap.servers"] = broker
        data["kafka"] = kafka
    registry, extra = data.get("schema_registry"), data.pop("registry_config", None)
    if isinstance(registry, str):
        data["schema_registry"] = {"url": registry}
    if extra is not None:
        data["schema_registry"] = {**_loose(data.get("schema_registry")), **_loose(extra)}
    return data


def _loose(value: Any) -> dict:
    """A mapping as it is; anything else (left for validation to refuse) as nothing."""
    return dict(value) if isinstance(value, Mapping) else {}


class _Environment(EnvSettingsSource):
    """BOTTLER_* variables. The shorthands' variables (BOTTLER_KAFKA: the bootstrap servers,
    BOTTLER_REGISTRY: the registry's URL) and the JSON property maps (BOTTLER_KAFKA_CONFIG,
    BOTTLER_REGISTRY_CONFIG) are read here, not by field name."""

    def _extract_field_info(self, field, field_name, model_config=None):
        """A setting with its own variables is read from those only (not BOTTLER_<FIELD>: a
        registry's BOTTLER_PORT, say, would be anybody's)."""
        found = super()._extract_field_info(field, field_name, model_config)
        if isinstance(field.validation_alias, AliasChoices):
            found = [info for info in found if info[0] != field_name] or found
        return found

    def get_field_value(self, field, field_name):
        if field_name in ("kafka", "schema_registry"):
            return None, field_name, False
        return super().get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        fields = self.settings_cls.model_fields
        if "kafka" in fields:
            data["kafka_config"] = _json_env(KAFKA_CONFIG_ENV)
            data["broker"] = _first_env(BROKER_ENV)
        if "schema_registry" in fields:
            data["registry_config"] = _json_env(REGISTRY_CONFIG_ENV)
            data["schema_registry"] = _first_env(REGISTRY_ENV)
        return {k: v for k, v in data.items() if v is not None}


def _first_env(names: tuple[str, ...]) -> str | None:
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


def _json_env(name: str) -> Any:
    text = os.environ.get(name)
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise BottlerError(f"{name} is not a JSON object",
                           f"write it as {name}='{{\"property\": \"value\"}}'") from None


class _File(YamlConfigSettingsSource):
    """The YAML file; other commands' keys are left out (one file may serve several)."""

    def __call__(self) -> dict[str, Any]:
        data = _by_name(self.settings_cls, normalize(self.yaml_data))
        own = set(self.settings_cls.model_fields)
        return {k: v for k, v in data.items() if k in own or k not in _KNOWN_KEYS}


class _Source(PydanticBaseSettingsSource):
    """A source's values by field name, shorthands folded in: so sources merge key by key and
    property by property, whatever spelling (field, variable, shorthand) each used."""

    def __init__(self, settings_cls, inner: PydanticBaseSettingsSource):
        super().__init__(settings_cls)
        self.inner = inner

    def _extract_field_info(self, field, field_name, model_config=None):
        """A setting with its own variables is read from those only (not BOTTLER_<FIELD>: a
        registry's BOTTLER_PORT, say, would be anybody's)."""
        found = super()._extract_field_info(field, field_name, model_config)
        if isinstance(field.validation_alias, AliasChoices):
            found = [info for info in found if info[0] != field_name] or found
        return found

    def get_field_value(self, field, field_name):  # pragma: no cover - __call__ does the work
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        return _by_name(self.settings_cls, normalize(self.inner()))


def _by_name(cls: type[BaseSettings], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` keyed by field names, not environment variables (the first one given wins)."""
    data = dict(data)
    for name, info in cls.model_fields.items():
        if not isinstance(info.validation_alias, AliasChoices):
            continue
        given = [data.pop(a) for a in info.validation_alias.choices
                 if isinstance(a, str) and a != name and a in data]
        if given and name not in data:
            data[name] = given[0]
    return data


class Settings(BaseSettings):
    """The base of every command's settings."""

    model_config = SettingsConfigDict(env_prefix="BOTTLER_", extra="forbid", populate_by_name=True)

    config_file: Path | None = Field(None, exclude=True)
    # Settings never echoed back, not even when invalid (they may hold passwords).
    secret_fields: ClassVar[frozenset[str]] = frozenset(
        {"kafka", "schema_registry", "postgres", "target", "source", "search", "users"})

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        _KNOWN_KEYS.update(cls.model_fields)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        environment = _Environment(settings_cls, case_sensitive=False, env_prefix="BOTTLER_")
        sources = [_Source(settings_cls, init_settings), _Source(settings_cls, environment)]
        config_file = init_settings.init_kwargs.get("config_file")
        if config_file:
            # read as UTF-8 whatever the locale (checked so by _check_config_file)
            sources.append(_File(settings_cls, yaml_file=config_file,
                                 yaml_file_encoding="utf-8"))
        return tuple(sources)

    def check_clients(self) -> None:
        """Fail in one line, before anything starts, when the broker or the registry cannot be
        used with the given properties (the settings classes with clients check theirs)."""

    def __repr_args__(self):
        """Shown masked, wherever settings are printed or logged."""
        for name, value in super().__repr_args__():
            if isinstance(value, str):
                value = redact(value)
            elif isinstance(value, dict):
                value = mask_properties(value)
            elif name in self.secret_fields and value is not None:
                value = MASK
            yield name, value


class KafkaSettings(Settings):
    """A command that talks to Kafka: `--broker`, `-C prop=value`, the `kafka:` section."""

    kafka: dict[str, str] = Field(default_factory=dict)

    @field_validator("kafka", mode="before")
    @classmethod
    def _kafka(cls, value: Any) -> dict[str, str]:
        props = {"bootstrap.servers": DEFAULT_BROKER, **_properties(value)}
        check_kafka_config(props)
        return props

    def check_clients(self) -> None:
        from common.kafka import check_broker

        check_broker(self.kafka)
        super().check_clients()

    @property
    def broker(self) -> str:
        return self.kafka["bootstrap.servers"]

    @property
    def kafka_config(self) -> dict[str, str]:
        """The properties besides bootstrap.servers."""
        return {k: v for k, v in self.kafka.items() if k != "bootstrap.servers"}


class RegistrySettings(Settings):
    """A command that talks to the schema registry: `--schema-registry URL`, `-R prop=value`,
    the `schema_registry:` section."""

    schema_registry: dict[str, str] = Field(default_factory=dict)

    @field_validator("schema_registry", mode="before")
    @classmethod
    def _registry(cls, value: Any) -> dict[str, str]:
        if isinstance(value, str):
            value = {"url": value}
        props = {"url": DEFAULT_REGISTRY, **_properties(value)}
        check_registry_config(props)
        return props

    def check_clients(self) -> None:
        from common.registry_client import check_registry

        check_registry(self.schema_registry)
        super().check_clients()

    @property
    def registry_url(self) -> str:
        return self.schema_registry["url"]


class TopicPrefixSettings(Settings):
    topic_prefix: str = ""

    @field_validator("topic_prefix")
    @classmethod
    def _topic_prefix(cls, value: str) -> str:
        if problem := prefix_problem(value):
            raise ValueError(problem)
        return value


class MetricsSettings(Settings):
    metrics_port: int | None = Field(None, ge=0, le=65535)
    # Loopback unless asked: metrics name tables and hosts, and nobody off the machine needs them
    # (a container, scraped over its network, passes 0.0.0.0).
    metrics_host: str = "127.0.0.1"


def check_kafka_config(props: dict[str, str]) -> None:
    """Raise ValueError when librdkafka refuses ``props`` (a client is made, none connects)."""
    from confluent_kafka import KafkaException, Producer

    offline = {k: v for k, v in props.items() if k != "bootstrap.servers"}
    try:
        Producer({**offline, "log_level": 0})  # no bootstrap.servers: it connects nowhere
    except KafkaException as exc:
        raise ValueError(f"librdkafka refuses it: {_masked(exc.args[0].str(), props)}") from None


def check_registry_config(props: dict[str, str]) -> None:
    """Raise ValueError when the registry client refuses ``props`` (it connects nowhere yet)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    try:
        SchemaRegistryClient(props)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"the registry client refuses it: {_masked(str(exc), props)}") from None


def _masked(text: str, props: Mapping[str, str]) -> str:
    for key, value in props.items():
        if is_secret_key(key) and value:
            text = text.replace(value, MASK)
    return redact(text)


S = TypeVar("S", bound=Settings)


def load(cls: type[S], given: Mapping[str, Any], *, config: str = "config",
         skip: tuple[str, ...] = ()) -> S:
    """``cls`` from the flags ``given`` (a command's parameters: None, False and empty mean "not
    given"), the environment and the YAML file (the ``config`` parameter, else
    BOTTLER_CONFIG). ``skip`` names parameters that are not settings (arguments, actions).
    Invalid settings raise one BottlerError naming each flag and problem."""
    flags = {k: v for k, v in given.items()
             if k not in skip and k != config and v is not None and v is not False
             and v != [] and v != {}}
    for name in ("kafka_config", "registry_config"):
        if isinstance(flags.get(name), list | tuple):
            flags[name] = parse_properties(flags[name], _flag(name))
    path = given.get(config) or os.environ.get(CONFIG_ENV) or None
    if path:
        _check_config_file(Path(path))
        flags["config_file"] = Path(path)
    try:
        return cls(**normalize(flags))
    except ValidationError as exc:
        raise _invalid(cls, exc, path) from None


def comma_separated(value: Any) -> Any:
    """A list option given as repeated flags, `a,b` or a YAML list: one flat list of names."""
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list | tuple):
        return [t.strip() for item in value for t in str(item).split(",") if t.strip()]
    return value  # not a list: left for the field's own validation to reject


def parse_properties(pairs: list[str] | tuple[str, ...], flag: str) -> dict[str, str]:
    """`-C`/`-R` values, prop=value each."""
    props = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            shown = MASK if is_secret_key(pair) else repr(pair)
            example = "compression.type=zstd" if flag == "-C" else "timeout=10"
            raise BottlerError(f"{flag} expects prop=value, got {shown}",
                               f"write each property as {flag} prop=value, e.g. {flag} {example}")
        props[name.strip()] = value.strip()
    return props


def _invalid(cls: type[Settings], exc: ValidationError, path: Any) -> BottlerError:
    errors = exc.errors()
    problems = "; ".join(_problem(cls, e) for e in errors)
    where = {e["loc"][0] for e in errors if e["loc"]}
    hint = f"see `{_command_path()} --help` for the accepted values"
    if "kafka" in where:
        hint = f"Kafka client properties are librdkafka's, see {LIBRDKAFKA_CONFIG_DOC}"
    elif "schema_registry" in where:
        hint = f"registry client properties are SchemaRegistryClient's, see {REGISTRY_CONFIG_DOC}"
    if path:
        hint += f"; check {path}"
    return BottlerError(f"invalid settings: {problems}", hint)


def _problem(cls: type[Settings], error: dict) -> str:
    """One problem as `--flag (key): message, got value` (never a secret's value)."""
    loc = [str(p) for p in error["loc"]]
    field = loc[0] if loc else "settings"
    for name, info in cls.model_fields.items():  # an environment variable's name: its setting
        alias = info.validation_alias
        if isinstance(alias, AliasChoices) and field in alias.choices:
            field = name
    flag = _flag(FLAG_PARAMS.get(field, field))
    name = f"{flag} ({field})" if flag else field
    if loc[1:]:
        name += "." + ".".join(loc[1:])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown setting"
    elif error["type"] == "missing":
        envs = _env_names(cls, field)
        message = "required" + (f", or set {envs[0]}" if envs else "")
    elif field not in cls.secret_fields and isinstance(error.get("input"), str | int | float):
        message += f", got {error['input']!r}"
    return f"{name}: {message}"


def _env_names(cls: type[Settings], field: str) -> list[str]:
    info = cls.model_fields.get(field)
    if info is None:
        return []
    if isinstance(info.validation_alias, AliasChoices):
        return [c for c in info.validation_alias.choices if isinstance(c, str)]
    return [f"BOTTLER_{field.upper()}"]


def _flag(param: str) -> str:
    """The running command's flag for parameter ``param`` (its long spelling), if any."""
    short = {"kafka_config": "-C", "registry_config": "-R"}  # the spelling users know them by
    if param in short:
        return short[param]
    ctx = _context()
    for p in ctx.command.params if ctx else ():
        if p.name == param and p.param_type_name == "option":
            return next((o for o in p.opts if o.startswith("--")), p.opts[0])
    return "" if ctx else "--" + param.replace("_", "-")


def _command_path() -> str:
    ctx = _context()
    return ctx.command_path if ctx else "bottler"


def _context():
    """The command line's context while a command runs (typer carries its own click)."""
    try:
        from typer._click.globals import get_current_context
    except ImportError:  # a typer on the click package
        from click import get_current_context
    return get_current_context(silent=True)


def _check_config_file(path: Path) -> None:
    import yaml

    from common.files import read_text

    text = read_text(path, "config file", f"check --config (or {CONFIG_ENV})")
    try:
        content = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where else ""
        raise BottlerError(f"config file {path} is not valid YAML{at}",
                           "fix the file: one `setting: value` per line") from None
    if content is not None and not isinstance(content, dict):
        raise BottlerError(f"config file {path} must hold a mapping of settings",
                           "write one `setting: value` per line, e.g. `topic_prefix: shop`")
