"""Capture settings: command-line flags over `BOTTLER_*` environment variables over a YAML config
file over defaults. Names follow Bottled Water's flags."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from bottler.errors import BottlerError


def _env(*names: str) -> AliasChoices:
    return AliasChoices(*names)


class CaptureSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="BOTTLER_", extra="forbid", populate_by_name=True)

    postgres: str = Field(validation_alias=_env("postgres", "BOTTLER_POSTGRES", "BOTTLER_PG_DSN"))
    slot: str = "bottler"
    broker: str = Field(
        "localhost:9092", validation_alias=_env("broker", "BOTTLER_BROKER", "BOTTLER_KAFKA")
    )
    schema_registry: str = Field(
        "http://localhost:8081",
        validation_alias=_env("schema_registry", "BOTTLER_SCHEMA_REGISTRY", "BOTTLER_REGISTRY"),
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
    metrics_port: int | None = None
    heartbeat_interval: float = Field(10.0, gt=0)
    transaction_topic: bool = False
    replica_identity_full: bool = False

    config_file: Path | None = Field(None, exclude=True)

    @field_validator("slot")
    @classmethod
    def _slot_name(cls, v: str) -> str:
        if not v or not all(c.islower() or c.isdigit() or c == "_" for c in v):
            raise ValueError("slot names may contain only lower-case letters, digits and _")
        return v

    @property
    def publication_name(self) -> str:
        return self.publication or self.slot

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
    if (path := given.get("config_file")) and not Path(path).is_file():
        raise BottlerError(f"config file {path} not found")
    try:
        return CaptureSettings(**given)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        raise BottlerError(
            f"invalid capture settings: {problems}",
            "see `bottler capture --help` and docs/configuration.md",
        ) from None
