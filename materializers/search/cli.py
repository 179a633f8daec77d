"""`bottler materialize search` and `bottler reindex` (registered by bottler/cli.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from pydantic import Field

from common import gctune, options
from common.config import MetricsSettings
from common.errors import BottlerError
from common.flags import Flag
from common.kafka import check_broker
from common.options import settings_command
from common.signals import stop_on_signals

INDEX_HELP = "The alias searches use; bottler writes its physical indices NAME-1, NAME-2…"


class ReaderSettings(options.ViewSettings):
    """What `materialize search` and `reindex` share."""

    search: Annotated[str, Flag("--search", "-s", help="Elasticsearch or OpenSearch URL "
                                "(http://user:password@host:9200)")] = "http://localhost:9200"
    topics: Annotated[list[str], options.topics("index")] = []
    batch_size: Annotated[int, options.BATCH_SIZE] = Field(5000, ge=1)
    mapping: Annotated[Path | None, Flag(
        "--mapping", help="JSON file: settings and field mappings that override the ones derived "
        "from the Avro schemas.")] = None
    transform: Annotated[str | None, Flag(
        "--transform", help="module:function(doc, change) returning the document to index (or "
        "None to leave the row out).")] = None


class SearchSettings(ReaderSettings, MetricsSettings):
    # the alias: required (a setting, so the file may give it)
    index: Annotated[str | None, Flag("--index", "-i", help=INDEX_HELP)] = None
    once: Annotated[bool, options.ONCE] = False
    join_group: Annotated[bool, options.JOIN_GROUP] = False
    instance_id: Annotated[str | None, options.INSTANCE_ID] = None


class ReindexSettings(ReaderSettings):
    max_lag: Annotated[int, Flag(
        "--max-lag", help="Swap once the new index is at most this many messages behind",
    )] = Field(100, ge=0)
    retention: Annotated[float, Flag(
        "--retention", help="Seconds to keep the old index after the swap before deleting it",
    )] = Field(0.0, ge=0)
    keep_old: Annotated[bool, Flag("--keep-old", help="Never delete the old index.")] = False
    handover_timeout: Annotated[float, Flag(
        "--handover-timeout",
        help="Seconds to wait for the live reader to hand the old index over")] = Field(
        30.0, gt=0)
    timeout: Annotated[float | None, Flag(
        "--timeout", help="Give up if the rebuild has not caught up after this many seconds.",
    )] = Field(None, gt=0)


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


@settings_command
def materialize_search(s: SearchSettings) -> None:
    """Keep a search index current from the table topics (one document per row); follows the
    alias when `bottler reindex` moves it to a rebuilt index."""
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
    gctune.tune()
    if s.once:
        reader.run_until_caught_up()
        return
    stop = stop_on_signals()
    reader.run(stop)


@settings_command
def reindex(
    s: ReindexSettings,
    name: str = typer.Argument(..., help=INDEX_HELP, show_default=False),
    show_status: bool = typer.Option(False, "--status",
                                     help="Show which physical index serves the alias and the "
                                     "lag of each, and exit."),
) -> None:
    """Rebuild a search index from offset zero into NAME-<next> while NAME keeps serving, then
    swap the alias atomically and retire the old index."""
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
    gctune.tune()
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
