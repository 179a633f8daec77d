"""Capture settings: command-line flags over `BOTTLER_*` environment variables over a YAML config
file over defaults. Names follow Bottled Water's flags."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from common.errors import BottlerError
from common.kafka import prefix_problem
from common.redact import MASK, redact

LIBRDKAFKA_CONFIG_DOC = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"
CONFIG_ENV = "BOTTLER_CONFIG"  # the YAML config file, when --config is not given

# Flag of each setting, for error messages (the YAML keys and BOTTLER_* names are the field names).
FLAGS = {
    "postgres": "--postgres", "slot": "--slot", "broker": "--broker",
    "schema_registry": "--schema-registry", "output_format": "--output-format",
    "allow_unkeyed": "--allow-unkeyed", "topic_prefix": "--topic-prefix",
    "on_error": "--on-error", "skip_snapshot": "--skip-snapshot", "kafka_config": "-C",
    "topic_config": "-T", "tables": "--tables", "publication": "--publication",
    "snapshot_workers": "--snapshot-workers",
    "snapshot_chunk_pages": "--snapshot-chunk-pages", "metrics_port": "--metrics-port",
    "metrics_host": "--metrics-host",
    "heartbeat_interval": "--heartbeat-interval", "transaction_topic": "--transaction-topic",
    "confirm_delay": "--confirm-delay",
    "replica_identity_full": "--replica-identity-full",
    "temporal_mode": "--temporal-mode", "partitions": "--partitions",
}
# Never echoed back, not even when invalid: they may carry passwords.
SECRET_FIELDS = {"postgres", "broker", "schema_registry", "kafka_config", "topic_config"}
SECRET_WORDS = ("password", "secret", "token", "credentials", "key")


def _env(*names: str) -> AliasChoices:
    """Environment names of a setting besides BOTTLER_<FIELD>. Only prefixed names: an alias is
    also read from the environment as is, so a bare one (say BROKER) would pick up unrelated
    variables. Flags and the YAML file use the field name (populate_by_name)."""
    return AliasChoices(*names)


class CaptureSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BOTTLER_", extra="forbid", populate_by_name=True)

    postgres: str = Field(validation_alias=_env("BOTTLER_POSTGRES", "BOTTLER_PG_DSN"))
    slot: str = "bottler"
    broker: str = Field("localhost:9092", validation_alias=_env("BOTTLER_BROKER", "BOTTLER_KAFKA"))
    schema_registry: str = Field(
        "http://localhost:8081",
        validation_alias=_env("BOTTLER_SCHEMA_REGISTRY", "BOTTLER_REGISTRY"),
    )
    output_format: Literal["avro", "json"] = "avro"
    allow_unkeyed: bool = False
    topic_prefix: str = ""
    on_error: Literal["exit", "log"] = "exit"
    skip_snapshot: bool = False
    kafka_config: dict[str, str] = {}
    topic_config: dict[str, str] = {}
    tables: list[str] = []
    publication: str | None = None  # default: one named after the slot, created if missing
    snapshot_workers: int = Field(2, ge=1, le=64)
    snapshot_chunk_pages: int = Field(2000, ge=1)  # 8 kB pages: ~16 MB of table per chunk
    metrics_port: int | None = Field(None, ge=0, le=65535)
    metrics_host: str = "127.0.0.1"  # loopback unless asked (a container passes 0.0.0.0)
    heartbeat_interval: float = Field(10.0, gt=0)
    confirm_delay: float = Field(0.0, ge=0)
    transaction_topic: bool = False
    replica_identity_full: bool = False
    # how dates and times are typed in the schemas (schemas/temporal.py): Avro logical types, or
    # plain ints with connect.name annotations that every Avro library reads
    temporal_mode: Literal["logical", "plain"] = "logical"
    # partitions of a new table topic (an existing topic keeps its own), and per table
    # ("schema.table": N, config file only) for the few big ones
    partitions: int = Field(1, ge=1, le=10000)
    table_partitions: dict[str, int] = {}

    config_file: Path | None = Field(None, exclude=True)

    @field_validator("slot")
    @classmethod
    def _slot_name(cls, v: str) -> str:
        if not v or len(v) > 63 or not all(c.islower() or c.isdigit() or c == "_" for c in v):
            raise ValueError(
                "slot names may contain only lower-case letters, digits and _ (at most 63)"
            )
        return v

    @field_validator("topic_prefix")
    @classmethod
    def _topic_prefix(cls, v: str) -> str:
        if problem := prefix_problem(v):
            raise ValueError(problem)
        return v

    @field_validator("kafka_config")
    @classmethod
    def _librdkafka_accepts(cls, v: dict[str, str]) -> dict[str, str]:
        """Unknown -C properties and bad values are refused here, not as a traceback later."""
        if v:
            check_kafka_config(v)
        return v

    @field_validator("table_partitions")
    @classmethod
    def _partition_counts(cls, v: dict[str, int]) -> dict[str, int]:
        for name, count in v.items():
            if "." not in name or not isinstance(count, int) or not 1 <= count <= 10000:
                raise ValueError(f"expects schema.table: partitions (1 to 10000), got {name}: "
                                 f"{count}")
        return v

    def partitions_of(self, schema: str, table: str) -> int:
        """The partition count a new topic of ``schema.table`` is created with."""
        return self.table_partitions.get(f"{schema}.{table}", self.partitions)

    @property
    def publication_name(self) -> str:
        return self.publication or self.slot

    def __repr_args__(self):
        """Shown masked, wherever the settings are printed or logged."""
        for name, value in super().__repr_args__():
            if name in ("postgres", "broker", "schema_registry") and isinstance(value, str):
                value = redact(value)
            elif name == "kafka_config" and isinstance(value, dict):
                value = {k: MASK if _secret_key(k) else v for k, v in value.items()}
            yield name, value

    @classmethod
    def settings_customise_sources(
        cls, settings_cls, init_settings, env_settings, dotenv_settings, file_secret_settings
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config_file = init_settings.init_kwargs.get("config_file")
        if config_file:
            sources.append(YamlConfigSettingsSource(settings_cls, yaml_file=config_file))
        return tuple(sources)


def load_settings(**given) -> CaptureSettings:
    """Settings from the given (non-None) flags, the environment and the config file."""
    given = {k: v for k, v in given.items() if v not in (None, [], {})}
    if "config_file" not in given and os.environ.get(CONFIG_ENV):
        given["config_file"] = Path(os.environ[CONFIG_ENV])
    if path := given.get("config_file"):
        _check_config_file(Path(path))
    try:
        return CaptureSettings(**given)
    except ValidationError as exc:
        errors = exc.errors()
        problems = "; ".join(_problem(e) for e in errors)
        hint = "see `bottler capture --help` for the accepted values"
        if any(e["loc"][:1] == ("kafka_config",) for e in errors):
            hint = f"-C takes librdkafka's properties, see {LIBRDKAFKA_CONFIG_DOC}"
        if given.get("config_file"):
            hint += f"; check {given['config_file']}"
        raise BottlerError(f"invalid capture settings: {problems}", hint) from None


def check_kafka_config(config: dict[str, str]) -> None:
    """Raise ValueError when librdkafka refuses ``config`` (a client is made, none connects)."""
    from confluent_kafka import KafkaException, Producer

    try:
        Producer({**config, "log_level": 0})  # no bootstrap.servers: it connects nowhere
    except KafkaException as exc:
        reason = exc.args[0].str()
        for key, value in config.items():
            if _secret_key(key) and value:
                reason = reason.replace(value, MASK)
        raise ValueError(f"librdkafka refuses it: {redact(reason)}") from None


def _check_config_file(path: Path) -> None:
    import yaml

    if not path.is_file():
        raise BottlerError(f"config file {path} not found",
                           f"check --config (or {CONFIG_ENV})")
    try:
        content = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}" if where else ""
        raise BottlerError(f"config file {path} is not valid YAML{at}",
                           "fix the file: one `setting: value` per line") from None
    if content is not None and not isinstance(content, dict):
        raise BottlerError(f"config file {path} must hold a mapping of settings",
                           "write one `setting: value` per line, e.g. `slot: bottler`")


def _problem(error: dict) -> str:
    """One validation problem as `--flag (field): message, got value` (never a secret value)."""
    loc = [str(p) for p in error["loc"]]
    field = loc[0] if loc else "settings"
    for alias in ("BOTTLER_POSTGRES", "BOTTLER_PG_DSN"):
        field = "postgres" if field == alias else field
    name = f"{FLAGS[field]} ({field})" if field in FLAGS else field
    if loc[1:]:
        name += "." + ".".join(loc[1:])
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "extra_forbidden":
        message = "unknown setting"
    elif error["type"] == "missing":
        message = "required" + (", or set BOTTLER_PG_DSN" if field == "postgres" else "")
    elif field not in SECRET_FIELDS and isinstance(error.get("input"), str | int | float):
        message += f", got {error['input']!r}"
    return f"{name}: {message}"


def _secret_key(key: str) -> bool:
    return any(word in key.lower() for word in SECRET_WORDS)
