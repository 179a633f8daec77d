"""Capture settings on the one configuration system (common/config.py): flags over `BOTTLER_*`
environment variables over the YAML file over defaults. Names follow Bottled Water's flags."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from common.config import (
    CONFIG_ENV,
    TOPIC_PREFIX,
    KafkaSettings,
    MetricsSettings,
    RegistrySettings,
    TopicPrefixSettings,
    comma_separated,
    env,
    load,
    parse_properties,
)
from common.flags import Flag

__all__ = ["CONFIG_ENV", "CaptureSettings", "load_settings"]


class CaptureSettings(KafkaSettings, RegistrySettings, TopicPrefixSettings, MetricsSettings):
    postgres: Annotated[str, Flag("--postgres", "-d", help="Source database DSN")] = Field(
        validation_alias=env("BOTTLER_PG_DSN", "BOTTLER_POSTGRES"))
    # A hot standby (PostgreSQL 16+) decodes but is read-only: what the capture writes (its
    # publications, heartbeats, watermarks) goes to its primary (capture/source/standby.py)
    primary: Annotated[str | None, Flag(
        "--primary", help="The primary's DSN (same database) when --postgres is a hot standby "
        "(PostgreSQL 16+): the capture decodes on the standby and writes its publications and "
        "heartbeats on the primary")] = None
    slot: Annotated[str, Flag("--slot", "-s", help="Replication slot name")] = "bottler"
    topic_prefix: Annotated[str, TOPIC_PREFIX.but(help="Prefix of every topic name")] = ""
    output_format: Annotated[Literal["avro", "json"], Flag(
        "--output-format", "-f", help="avro or json")] = "avro"
    allow_unkeyed: Annotated[bool, Flag(
        "--allow-unkeyed", "-u", help="Publish tables without a key (no deletes).")] = False
    # A stopped capture keeps its slot, which keeps WAL until the source's disk fills: a row
    # that cannot be published goes to the dead-letter topic rather than stop everything.
    on_error: Annotated[Literal["dead-letter", "exit", "log"], Flag(
        "--on-error", "-e", help="dead-letter, exit or log: what a row that cannot be published "
        "does")] = "dead-letter"
    skip_snapshot: Annotated[bool, Flag(
        "--skip-snapshot", "-x", help="Stream only new changes (new slot only).")] = False
    topic_config: Annotated[dict[str, str], Flag(
        "--topic-config", "-T", metavar="PROP=VALUE", help="topic setting prop=val")] = {}
    tables: Annotated[list[str], Flag(
        "--tables", help="Tables to publish (schema.table, repeatable or comma-separated)",
        shown="all")] = []
    publication: Annotated[str | None, Flag(  # None: one named after the slot, made if missing
        "--publication", help="Use this existing publication.")] = None
    snapshot_workers: Annotated[int, Flag(
        "--snapshot-workers", help="Parallel snapshot processes")] = Field(2, ge=1, le=64)
    snapshot_chunk_pages: Annotated[int, Flag(  # 8 kB pages: ~16 MB of table per chunk
        "--snapshot-chunk-pages", help="Pages (8 kB) per snapshot chunk, the unit workers share;"
        " a restart resumes a chunk after its last acknowledged quarter")] = Field(2000, ge=1)
    incremental_chunk_rows: Annotated[int, Flag(  # rows an incremental snapshot reads at once
        "--incremental-chunk-rows", help="Rows per chunk of an incremental snapshot",
    )] = Field(10_000, ge=1)
    heartbeat_interval: Annotated[float, Flag(
        "--heartbeat-interval", help="Seconds between heartbeats")] = Field(10.0, gt=0)
    transaction_topic: Annotated[bool, Flag(
        "--transaction-topic", help="Publish transaction boundaries.")] = False
    # pgoutput protocol 2+ with streaming (PostgreSQL 14 on): a transaction larger than the
    # source's logical_decoding_work_mem comes while it runs, staged in stream_spool_dir until
    # it commits (instead of spilling to the source's disk), then published in one Kafka
    # transaction; auto: where the server streams and the broker grants the capture's
    # transactional id, else protocol 1 as before (said in the log)
    stream_large_transactions: Annotated[Literal["auto", "on", "off"], Flag(
        "--stream-large-transactions", help="auto, on or off: have PostgreSQL (14+) stream a "
        "transaction larger than logical_decoding_work_mem while it runs, staged on local disk "
        "until it commits and then published in one Kafka transaction, instead of spilling it "
        "to the source's disk (auto: where the server and the broker allow it)")] = "auto"
    stream_spool_dir: Annotated[Path | None, Flag(  # None: see spool_dir
        "--stream-spool-dir", help="Where streamed transactions wait for their commit",
        shown="<temp dir>/bottler-stream-<system id>-<slot>")] = None
    # a committed streamed transaction's rows parsed and encoded by these processes side by side,
    # the main thread left to send them (capture/stream/replay.py)
    stream_replay_workers: Annotated[int, Flag(
        "--stream-replay-workers", help="Processes that encode a committed streamed "
        "transaction's rows (0: the main thread alone)")] = Field(2, ge=0, le=64)
    # PostgreSQL 17+ copies a failover slot to the standbys that sync_replication_slots, so
    # the capture resumes on a promoted standby (docs/operations.md, high availability)
    failover: Annotated[Literal["auto", "on", "off"], Flag(
        "--failover", help="auto, on or off: create the slot as a failover slot, which a "
        "standby with sync_replication_slots keeps a copy of (PostgreSQL 17+; auto: where the "
        "server has them)")] = "auto"
    # PostgreSQL 18 publishes stored generated columns when the publication asks
    # (publish_generated_columns = stored): auto asks where the server can, never on older ones
    generated_columns: Annotated[Literal["auto", "on", "off"], Flag(
        "--generated-columns", help="auto, on or off: publish stored generated columns as "
        "values (PostgreSQL 18+; auto: where the server can)")] = "auto"
    replica_identity_full: Annotated[bool, Flag(
        "--replica-identity-full",
        help="Set REPLICA IDENTITY FULL on tables with TOASTable columns.")] = False
    # how dates and times are typed in the schemas (schemas/temporal.py): Avro logical types, or
    # plain ints with connect.name annotations that every Avro library reads
    temporal_mode: Annotated[Literal["logical", "plain"], Flag(
        "--temporal-mode", help="logical (Avro date/time logical types) or plain (ints with "
        "connect.name annotations, which every Python consumer reads)")] = "logical"
    slot_warn_retained_mb: Annotated[int, Flag(
        "--slot-warn-retained-mb",
        help="Warn when the slot makes the source keep this much WAL (MiB)")] = Field(10240, ge=1)
    slot_warn_safe_mb: Annotated[int, Flag(
        "--slot-warn-safe-mb",
        help="Warn when the slot's safe_wal_size falls under this (MiB)")] = Field(2048, ge=0)
    recover_lost_slot: Annotated[bool, Flag(
        "--recover-lost-slot", help="If the slot was invalidated (wal_status lost), or is "
        "missing though the capture streamed from it (a failover without its synchronized "
        "copy, or dropped): reset the topics, new slot, snapshot.")] = False
    # partitions of a new table topic (an existing topic keeps its own), and per table
    # ("schema.table": N, config file only) for the few big ones
    partitions: Annotated[int, Flag(
        "--partitions", help="Partitions of each new table topic (keyed by murmur2: a row's "
        "events stay in one); per table with table_partitions in --config",
    )] = Field(1, ge=1, le=10000)
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
