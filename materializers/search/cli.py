"""`bottler materialize search` and `bottler reindex` (registered by bottler/cli.py)."""

from __future__ import annotations

from pathlib import Path

import typer
from pydantic import Field

from common import options
from common.config import MetricsSettings, load
from common.errors import BottlerError
from common.kafka import check_broker
from common.options import option
from common.signals import stop_on_signals

INDEX_HELP = "The alias searches use; bottler writes its physical indices NAME-1, NAME-2…"


class ReaderSettings(options.ViewSettings):
    """What `materialize search` and `reindex` share."""

    search: str = "http://localhost:9200"
    topics: list[str] = []
    batch_size: int = Field(5000, ge=1)
    mapping: Path | None = None
    transform: str | None = None


class SearchSettings(ReaderSettings, MetricsSettings):
    index: str | None = None  # the alias: required (a setting, so the file may give it)
    once: bool = False
    join_group: bool = False
    instance_id: str | None = None


class ReindexSettings(ReaderSettings):
    max_lag: int = Field(100, ge=0)
    retention: float = Field(0.0, ge=0)
    keep_old: bool = False
    handover_timeout: float = Field(30.0, gt=0)
    timeout: float | None = Field(None, gt=0)


def _reader_options(s: ReaderSettings, loop_options: dict | None = None):
    from materializers.search.documents import load_transform
    from materializers.search.indices import load_definition
    from materializers.search.reader import ReaderOptions

    return ReaderOptions(
        bootstrap=s.kafka, registry=s.schema_registry, prefix=s.topic_prefix,
        topics=s.topics or None, on_poison=s.on_poison, batch_size=s.batch_size,
        definition=load_definition(s.mapping),
        transform=load_transform(s.transform) if s.transform else None,
        loop_options=loop_options or {},
    )


Search = option("--search", "-s", help="Elasticsearch or OpenSearch URL "
                "(http://user:password@host:9200) [default: http://localhost:9200] "
                "[env: BOTTLER_SEARCH]")
Mapping = option("--mapping", help="JSON file: settings and field mappings that override the "
                 "ones derived from the Avro schemas.")
TransformOpt = option("--transform", help="module:function(doc, change) returning the document "
                      "to index (or None to leave the row out).")
OnPoison = options.on_poison()
BatchSize = options.batch_size()


def materialize_search(
    index: str | None = option("--index", "-i", help=INDEX_HELP + " [env: BOTTLER_INDEX]"),
    broker: str | None = options.Broker,
    kafka_config: list[str] | None = options.KafkaConfig,
    schema_registry: str | None = options.SchemaRegistry,
    registry_config: list[str] | None = options.RegistryConfig,
    search: str | None = Search,
    topic_prefix: str | None = options.TopicPrefix,
    topics: list[str] | None = options.TopicsToIndex,
    mapping: Path | None = Mapping,
    transform: str | None = TransformOpt,
    on_poison: str | None = OnPoison,
    batch_size: int | None = BatchSize,
    once: bool = options.once(),
    join_group: bool = options.join_group(),
    instance_id: str | None = options.instance_id(),
    metrics_port: int | None = options.MetricsPort,
    metrics_host: str | None = options.MetricsHost,
    config: Path | None = options.Config,
) -> None:
    """Keep a search index current from the table topics (one document per row); follows the
    alias when `bottler reindex` moves it to a rebuilt index."""
    s = load(SearchSettings, locals())
    from materializers.search.client import SearchClient
    from materializers.search.reader import LiveReader

    if not s.index:
        raise BottlerError("no index: pass --index NAME (or set index in the --config file, or "
                           "BOTTLER_INDEX)")
    group = {"join_group": True, "instance_id": s.instance_id} if s.join_group else {}
    reader_options = _reader_options(s, group)
    s.check_clients()
    options.serve_metrics(s.metrics_port, s.metrics_host)
    reader = LiveReader(SearchClient(s.search), s.index, reader_options)
    if s.once:
        reader.run_until_caught_up()
        return
    stop = stop_on_signals()
    reader.run(stop)


def reindex(
    name: str = typer.Argument(..., help=INDEX_HELP, show_default=False),
    show_status: bool = typer.Option(False, "--status",
                                     help="Show which physical index serves the alias and the "
                                     "lag of each, and exit."),
    broker: str | None = options.Broker,
    kafka_config: list[str] | None = options.KafkaConfig,
    schema_registry: str | None = options.SchemaRegistry,
    registry_config: list[str] | None = options.RegistryConfig,
    search: str | None = Search,
    topic_prefix: str | None = options.TopicPrefix,
    topics: list[str] | None = options.TopicsToIndex,
    mapping: Path | None = Mapping,
    transform: str | None = TransformOpt,
    on_poison: str | None = OnPoison,
    batch_size: int | None = BatchSize,
    max_lag: int | None = option("--max-lag", help="Swap once the new index is at most this "
                                 "many messages behind [default: 100]"),
    retention: float | None = option("--retention", help="Seconds to keep the old index after "
                                     "the swap before deleting it [default: 0]"),
    keep_old: bool = option("--keep-old", default=False, help="Never delete the old index."),
    handover_timeout: float | None = option("--handover-timeout",
                                            help="Seconds to wait for the live reader to hand "
                                            "the old index over [default: 30]"),
    timeout: float | None = option("--timeout", help="Give up if the rebuild has not caught up "
                                   "after this many seconds."),
    config: Path | None = options.Config,
) -> None:
    """Rebuild a search index from offset zero into NAME-<next> while NAME keeps serving, then
    swap the alias atomically and retire the old index."""
    s = load(ReindexSettings, locals(), skip=("name", "show_status"))
    from rich.console import Console

    from materializers.search.client import SearchClient
    from materializers.search.reindex import reindex as run_reindex

    client = SearchClient(s.search)
    console = Console()
    if show_status:
        check_broker(s.kafka)  # only Kafka: the status reads no schema
        _print_status(console, client, name, s.kafka)
        return
    reader_options = _reader_options(s)
    s.check_clients()
    run_reindex(client, name, reader_options, max_lag=s.max_lag, retention=s.retention,
                keep_old=s.keep_old, handover_timeout=s.handover_timeout, timeout=s.timeout,
                say=lambda line: console.print(line, highlight=False),
                abandon=stop_on_signals())


def _print_status(console, client, name: str, broker) -> None:
    import datetime as dt

    from rich.table import Table

    from materializers.search.reindex import status

    rows = status(client, name, broker)
    if not rows:
        raise BottlerError(f"no physical index of {name} ({name}-1, {name}-2…)",
                           f"create it: bottler materialize search --index {name}")
    table = Table(title=f"search index {name}", title_justify="left")
    for column in ("physical index", "serves the alias", "documents", "lag (messages)",
                   "last flush", "state"):
        table.add_column(column)
    serving = next((i for i, row in enumerate(rows) if row.serving), len(rows))
    for i, row in enumerate(rows):  # oldest first
        flushed = (dt.datetime.fromtimestamp(row.updated_at / 1000).isoformat(" ", "seconds")
                   if row.updated_at else "-")
        state = ("live" if row.serving else "released" if row.released
                 else "building" if i > serving else "old")
        table.add_row(row.index, "yes" if row.serving else "", f"{row.documents:,}",
                      "-" if row.lag is None else f"{row.lag:,}", flushed, state)
    console.print(table)
