"""`bottler materialize search` and `bottler reindex` (registered by bottler/cli.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from common import options
from common.errors import BottlerError
from common.signals import stop_on_signals

INDEX_HELP = "The alias searches use; bottler writes its physical indices NAME-1, NAME-2…"


def _reader_options(broker, schema_registry, topic_prefix, topics, mapping, transform,
                    on_poison, batch_size, join_group=False, instance_id=None):
    from materializers.core import poison
    from materializers.search.documents import load_transform
    from materializers.search.indices import load_definition
    from materializers.search.reader import ReaderOptions

    poison.checked(on_poison)
    return ReaderOptions(
        bootstrap=broker, registry=schema_registry, prefix=topic_prefix, topics=topics or None,
        on_poison=on_poison, batch_size=batch_size, definition=load_definition(mapping),
        transform=load_transform(transform) if transform else None,
        loop_options={"join_group": True, "instance_id": instance_id} if join_group else {},
    )


Search = typer.Option("http://localhost:9200", "--search", "-s", envvar="BOTTLER_SEARCH",
                      help="Elasticsearch or OpenSearch URL (http://user:password@host:9200) "
                      "[env: BOTTLER_SEARCH]")
Mapping = typer.Option(None, "--mapping", help="JSON file: settings and field mappings that "
                       "override the ones derived from the Avro schemas.")
TransformOpt = typer.Option(None, "--transform",
                            help="module:function(doc, change) returning the document to "
                            "index (or None to leave the row out).")
OnPoison = options.on_poison()
BatchSize = options.batch_size()


def materialize_search(
    index: str = typer.Option(..., "--index", "-i", help=INDEX_HELP, show_default=False),
    broker: str = options.Broker,
    schema_registry: str = options.SchemaRegistry,
    search: str = Search,
    topic_prefix: str = options.TopicPrefix,
    topics: list[str] | None = options.TopicsToIndex,
    mapping: Path | None = Mapping,
    transform: str | None = TransformOpt,
    on_poison: str = OnPoison,
    batch_size: int = BatchSize,
    once: bool = options.once(),
    join_group: bool = options.join_group(),
    instance_id: str | None = options.instance_id(),
    metrics_port: int | None = options.MetricsPort,
    metrics_host: str = options.MetricsHost,
) -> None:
    """Keep a search index current from the table topics (one document per row); follows the
    alias when `bottler reindex` moves it to a rebuilt index."""
    from materializers.search.client import SearchClient
    from materializers.search.reader import LiveReader

    reader_options = _reader_options(broker, schema_registry, topic_prefix, topics, mapping,
                                     transform, on_poison, batch_size, join_group,
                                     instance_id)
    options.serve_metrics(metrics_port, metrics_host)
    reader = LiveReader(SearchClient(search), index, reader_options)
    if once:
        reader.run_until_caught_up()
        return
    stop = stop_on_signals()
    reader.run(stop)


def reindex(
    name: str = typer.Argument(..., help=INDEX_HELP, show_default=False),
    show_status: bool = typer.Option(False, "--status",
                                     help="Show which physical index serves the alias and the "
                                     "lag of each, and exit."),
    broker: str = options.Broker,
    schema_registry: str = options.SchemaRegistry,
    search: str = Search,
    topic_prefix: str = options.TopicPrefix,
    topics: list[str] | None = options.TopicsToIndex,
    mapping: Path | None = Mapping,
    transform: str | None = TransformOpt,
    on_poison: str = OnPoison,
    batch_size: int = BatchSize,
    max_lag: int = typer.Option(100, "--max-lag",
                                help="Swap once the new index is at most this many messages "
                                "behind."),
    retention: float = typer.Option(0.0, "--retention",
                                    help="Seconds to keep the old index after the swap before "
                                    "deleting it."),
    keep_old: bool = typer.Option(False, "--keep-old", help="Never delete the old index."),
    handover_timeout: float = typer.Option(30.0, "--handover-timeout",
                                           help="Seconds to wait for the live reader to hand "
                                           "the old index over."),
    timeout: float | None = typer.Option(None, "--timeout",
                                         help="Give up if the rebuild has not caught up after "
                                         "this many seconds."),
) -> None:
    """Rebuild a search index from offset zero into NAME-<next> while NAME keeps serving, then
    swap the alias atomically and retire the old index."""
    from rich.console import Console

    from materializers.search.client import SearchClient
    from materializers.search.reindex import reindex as run_reindex

    client = SearchClient(search)
    console = Console()
    if show_status:
        _print_status(console, client, name, broker)
        return
    reader_options = _reader_options(broker, schema_registry, topic_prefix, topics, mapping,
                                     transform, on_poison, batch_size)
    run_reindex(client, name, reader_options, max_lag=max_lag, retention=retention,
                keep_old=keep_old, handover_timeout=handover_timeout, timeout=timeout,
                say=lambda line: console.print(line, highlight=False))


def _print_status(console, client, name: str, broker: str) -> None:
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
