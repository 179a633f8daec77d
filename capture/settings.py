"""Capture settings on the one configuration system (common/config.py): flags over `BOTTLER_*`
environment variables over the YAML file over defaults. Names follow Bottled Water's flags."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from common.config import (
    CONFIG_ENV,
    LIBRDKAFKA_CONFIG_DOC,
    KafkaSettings,
    MetricsSettings,
    RegistrySettings,
    TopicPrefixSettings,
    comma_separated,
    env,
    load,
    parse_properties,
)

__all__ = ["CONFIG_ENV", "LIBRDKAFKA_CONFIG_DOC", "CaptureSettings", "load_settings"]


class CaptureSettings(KafkaSettings, RegistrySettings, TopicPrefixSettings, MetricsSettings):
    postgres: str = Field(validation_alias=env("BOTTLER_PG_DSN", "BOTTLER_POSTGRES"))
    slot: str = "bottler"
    output_format: Literal["avro", "json"] = "avro"
    allow_unkeyed: bool = False
    # A stopped capture keeps its slot, which keeps WAL until the source's disk fills: a row
    # that cannot be published goes to the dead-letter topic rather than stop everything.
    on_error: Literal["dead-letter", "exit", "log"] = "dead-letter"
    skip_snapshot: bool = False
    topic_config: dict[str, str] = {}
    tables: list[str] = []
    publication: str | None = None  # default: one named after the slot, created if missing
    snapshot_workers: int = Field(2, ge=1, le=64)
    snapshot_chunk_pages: int = Field(2000, ge=1)  # 8 kB pages: ~16 MB of table per chunk
    incremental_chunk_rows: int = Field(10_000, ge=1)  # rows an incremental snapshot reads at once
    heartbeat_interval: float = Field(10.0, gt=0)
    transaction_topic: bool = False
    # pgoutput protocol 2+ with streaming (PostgreSQL 14 on): a transaction larger than the
    # source's logical_decoding_work_mem comes while it runs, staged in stream_spool_dir until
    # it commits, instead of spilling to the source's disk and arriving whole at its commit
    stream_large_transactions: bool = False
    stream_spool_dir: Path | None = None  # default: see spool_dir
    replica_identity_full: bool = False
    # how dates and times are typed in the schemas (schemas/temporal.py): Avro logical types, or
    # plain ints with connect.name annotations that every Avro library reads
    temporal_mode: Literal["logical", "plain"] = "logical"
    slot_warn_retained_mb: int = Field(10240, ge=1)  # warn when the slot keeps this much WAL
    slot_warn_safe_mb: int = Field(2048, ge=0)  # ... or is this close to being invalidated
    recover_lost_slot: bool = False
    # partitions of a new table topic (an existing topic keeps its own), and per table
    # ("schema.table": N, config file only) for the few big ones
    partitions: int = Field(1, ge=1, le=10000)
    table_partitions: dict[str, int] = {}

    @field_validator("slot")
    @classmethod
    def _slot_name(cls, v: str) -> str:
        if not v or len(v) > 63 or not all(c.islower() or c.isdigit() or c == "_" for c in v):
            raise ValueError(
                "slot names may contain only lower-case letters, digits and _ (at most 63)"
            )
        return v

    @field_validator("tables", mode="before")
    @classmethod
    def _table_list(cls, v: Any) -> Any:
        return comma_separated(v)

    @field_validator("topic_config", mode="before")
    @classmethod
    def _topic_properties(cls, v: Any) -> Any:
        return parse_properties(v, "-T") if isinstance(v, list | tuple) else v

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

    def spool_dir(self, system_identifier: str) -> Path:
        """Where streamed transactions wait for their commit: --stream-spool-dir, or one of the
        temporary directory's named after the source server (its system identifier) and the
        slot, which together name one capture."""
        return self.stream_spool_dir or (
            Path(tempfile.gettempdir()) / f"bottler-stream-{system_identifier}-{self.slot}")


def load_settings(**given) -> CaptureSettings:
    """Settings from the given flags (None: not given), the environment and the config file."""
    return load(CaptureSettings, given, config="config_file")
