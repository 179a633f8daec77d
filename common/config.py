"""One configuration system for every command: a command's settings are a pydantic-settings class
read from, highest first, its flags, `BOTTLER_*` environment variables and one YAML file
(`--config`, or `BOTTLER_CONFIG`), over the defaults. The file's keys are the settings' names,
the same in every command, so one file can serve several commands (a key another command has is
ignored; a key no command has is an error).

A command declares its settings once, as a subclass of `Settings` (mixing in `KafkaSettings`,
`RegistrySettings`, `MetricsSettings` for the clients it makes) whose fields carry their flags
(common/flags.py); `common.options.settings_command` makes the typer options from them and
hands the command its settings, read by `load`: a flag not given leaves the setting to the
environment, the file or the default.

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
from typing import Annotated, Any, ClassVar, TypeVar

from pydantic import AliasChoices, Field, PrivateAttr, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from common.errors import BottlerError
from common.flags import Flag
from common.kafka import prefix_problem
from common.redact import MASK, is_secret_key, mask_properties, redact
from common.settings_errors import invalid

CONFIG_ENV = "BOTTLER_CONFIG"  # the YAML file, when --config is not given
DEFAULT_BROKER = "localhost:9092"
DEFAULT_REGISTRY = "http://localhost:8081"

# The shorthands' environment variables (the first is the documented one).
BROKER_ENV = ("BOTTLER_KAFKA", "BOTTLER_BROKER")
REGISTRY_ENV = ("BOTTLER_REGISTRY", "BOTTLER_SCHEMA_REGISTRY")
KAFKA_CONFIG_ENV = "BOTTLER_KAFKA_CONFIG"
REGISTRY_CONFIG_ENV = "BOTTLER_REGISTRY_CONFIG"

_KNOWN_KEYS: set[str] = {"broker", "kafka_config", "registry_config"}  # every command's settings

# The clients' flags, shared by every command with the client (common/flags.py).
BROKER = Flag("--broker", "-b", help="Kafka bootstrap servers", param="broker",
              shown=DEFAULT_BROKER, env=BROKER_ENV[0])
KAFKA_CONFIG = Flag("--kafka-config", "-C", param="kafka_config", env=KAFKA_CONFIG_ENV,
                    metavar="PROP=VALUE", help="Kafka client property (librdkafka's, e.g. "
                    "security.protocol=SASL_SSL), repeatable; secrets belong in the environment "
                    "or the file's `kafka:`")
SCHEMA_REGISTRY = Flag("--schema-registry", "-r", help="Schema registry URL",
                       param="schema_registry", shown=DEFAULT_REGISTRY, env=REGISTRY_ENV[0])
REGISTRY_CONFIG = Flag("--registry-config", "-R", param="registry_config",
                       env=REGISTRY_CONFIG_ENV, metavar="PROP=VALUE",
                       help="Schema registry client property (e.g. ssl.ca.location=FILE), "
                       "repeatable; basic.auth.user.info belongs in the environment or the "
                       "file's `schema_registry:`")
TOPIC_PREFIX = Flag("--topic-prefix", "-p", help="The capture's --topic-prefix")


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
    _flags: frozenset[str] = PrivateAttr(frozenset())  # the parameters given on the command line
    # Settings never echoed back, not even when invalid (they may hold passwords).
    secret_fields: ClassVar[frozenset[str]] = frozenset(
        {"kafka", "schema_registry", "postgres", "primary", "target", "source", "search", "users"})

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

    @property
    def flags(self) -> frozenset[str]:
        """The parameters given as flags (``broker``, not ``kafka``), not from the environment or
        the file."""
        return self._flags

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

    kafka: Annotated[dict[str, str], BROKER, KAFKA_CONFIG] = Field(default_factory=dict)

    @field_validator("kafka", mode="before")
    @classmethod
    def _kafka(cls, value: Any) -> dict[str, str]:
        props = {"bootstrap.servers": DEFAULT_BROKER, **_properties(value)}
        check_kafka_config(props)
        return props

    def check_clients(self) -> None:
        from concurrent.futures import ThreadPoolExecutor

        from common.kafka import check_broker

        # beside the other checks (the registry's, with its client's import): a command's
        # start waits for the longer of them, not for both; the broker's error still comes first
        with ThreadPoolExecutor(1, thread_name_prefix="check") as pool:
            broker = pool.submit(check_broker, self.kafka)
            try:
                super().check_clients()
            finally:
                broker.result()

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

    schema_registry: Annotated[dict[str, str], SCHEMA_REGISTRY, REGISTRY_CONFIG] = Field(
        default_factory=dict)

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
    topic_prefix: Annotated[str, TOPIC_PREFIX] = ""

    @field_validator("topic_prefix")
    @classmethod
    def _topic_prefix(cls, value: str) -> str:
        if problem := prefix_problem(value):
            raise ValueError(problem)
        return value


class MetricsSettings(Settings):
    metrics_port: Annotated[int | None, Flag(
        "--metrics-port", help="Serve Prometheus metrics on this port")] = Field(
        None, ge=0, le=65535)
    # Loopback unless asked: metrics name tables and hosts, and nobody off the machine needs them
    # (a container, scraped over its network, passes 0.0.0.0).
    metrics_host: Annotated[str, Flag(
        "--metrics-host", help="Address the metrics are served on (0.0.0.0: every interface)",
    )] = "127.0.0.1"


def check_kafka_config(props: dict[str, str]) -> None:
    """Raise ValueError when librdkafka refuses ``props`` (a client is made, none connects)."""
    from confluent_kafka import KafkaException, Producer

    offline = {k: v for k, v in props.items() if k != "bootstrap.servers"}
    try:
        Producer({**offline, "log_level": 0})  # no bootstrap.servers: it connects nowhere
    except KafkaException as exc:
        raise ValueError(f"librdkafka refuses it: {_masked(exc.args[0].str(), props)}") from None


def check_registry_config(props: dict[str, str]) -> None:
    """Raise ValueError when the registry client refuses ``props`` (it connects nowhere yet).
    Plain http(s) URLs alone, which it takes, are not shown to it: its package takes 0.13 s to
    import, which every start would pay here, before its checks (the capture's run it beside
    the database's)."""
    if set(props) == {"url"} and all(
            url.strip().startswith(("http://", "https://")) for url in props["url"].split(",")):
        return
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
            flags[name] = parse_properties(flags[name], "-C" if name == "kafka_config" else "-R")
    named = set(flags)
    path = given.get(config) or os.environ.get(CONFIG_ENV) or None
    if path:
        _check_config_file(Path(path))
        flags["config_file"] = Path(path)
    try:
        settings = cls(**normalize(flags))
    except ValidationError as exc:
        raise invalid(cls, exc, path) from None
    settings._flags = frozenset(named)
    return settings


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
