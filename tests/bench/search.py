"""The search materializer against the search API's own bulk path, on a table topic of N rows
that a capture already wrote (ids, two 32-character texts, a timestamp: tests/bench/data.py):

- raw ceiling: the topic's rows as the documents the materializer makes (same ``_id``s, same
  JSON, decoded and built beforehand, not timed), sent with plain ``_bulk`` index requests of
  BULK documents, one after the other, into a fresh index with the same mapping, once to warm
  the engine and once timed;
- rebuild: the materializer (a consumer loop and a SearchSink, in this process) from offset zero
  into a fresh index until caught up, timed from the loop's start to its return: consuming,
  decoding, building the documents, bulk requests with external versions, offsets documents.

``python -m tests.bench.search [--rows N]`` runs it alone on an isolated stack.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from collections.abc import Sequence
from urllib.parse import quote

from common import gctune
from materializers.core import Change, Materializer
from materializers.search import indices
from materializers.search.client import SearchClient
from materializers.search.documents import TABLE_FIELD, Layout, document_id
from materializers.search.reader import ReaderOptions
from tests.bench.procs import CpuMeter
from tests.bench.report import Figure, Target

ROWS = 100_000  # standalone default
BULK = 5000  # documents per bulk request, the materializer's default batch too
RAW_INDEX = "bench-search-raw"
ALIAS = "bench-search"


class _Documents:
    """A sink that only builds the bulk body of every row, as the materializer would send it
    without versions: the raw ceiling's input."""

    def __init__(self, flattened: str):
        self.flattened = flattened
        self.lines: list[bytes] = []
        self.properties: dict = {}
        self._layouts: dict[int, Layout] = {}

    def stored_offsets(self, partitions):
        return {}

    def write(self, changes: Sequence[Change], offsets) -> None:
        for change in changes:
            if change.op != "upsert":
                continue
            layout = self._layouts.get(change.value_schema_id)
            if layout is None:
                layout = self._layouts[change.value_schema_id] = Layout.of(change.value_schema,
                                                                           self.flattened)
                self.properties.update(layout.properties)
            meta = json.dumps({"index": {"_id": document_id(change)}}, separators=(",", ":"))
            doc = json.dumps(layout.document(change.value, str(change.table)),
                             separators=(",", ":"), ensure_ascii=False)
            self.lines.append(f"{meta}\n{doc}\n".encode())

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass


def raw_bulk(client: SearchClient, bootstrap: str, registry: str, topic: str, rows: int,
             cpu_roots: dict[str, int | None] | None = None) -> Figure:
    docs = _Documents(client.flavour().flattened)
    Materializer(docs, bootstrap=bootstrap, registry=registry, group_id="bench-search-raw",
                 topics=[topic], progress=False).run_until_caught_up(timeout=600)
    if len(docs.lines) != rows:
        raise RuntimeError(f"{topic} holds {len(docs.lines):,} rows, not {rows:,}")
    client.request("DELETE", f"/{RAW_INDEX}", ok=(404,))  # the bench's own, unmarked
    client.request("PUT", f"/{RAW_INDEX}", {"mappings": {"properties": {
        TABLE_FIELD: {"type": "keyword"}, **docs.properties}}})
    size = sum(len(line) for line in docs.lines)
    meter = CpuMeter(cpu_roots or {}).start()
    own = _own_cpu()
    start = time.perf_counter()
    for i in range(0, rows, BULK):
        answer = client.request("POST", f"/{quote(RAW_INDEX)}/_bulk",
                                b"".join(docs.lines[i:i + BULK]), ndjson=True)
        if answer.get("errors"):
            raise RuntimeError(f"raw bulk refused documents: {str(answer['items'][:2])[:300]}")
    elapsed = time.perf_counter() - start
    cpu = meter.note() + f", client (this process) {_own_cpu() - own:.1f}"
    _check_count(client, RAW_INDEX, rows)
    client.request("DELETE", f"/{RAW_INDEX}", ok=(404,))  # the bench's own, unmarked
    return Figure(
        f"search ceiling: raw _bulk of the same documents ({client.flavour()})", rows / elapsed,
        "docs/s",
        notes=[f"{rows:,} documents ({size / rows:.0f} B of bulk body each) in requests of "
               f"{BULK:,}, one at a time, into a fresh index with the derived mapping: "
               f"{elapsed:.1f} s", cpu],
    )


def materialized(client: SearchClient, bootstrap: str, registry: str, topic: str, rows: int,
                 ceiling: Figure, cpu_roots: dict[str, int | None] | None = None) -> Figure:
    for name in indices.versions(client, ALIAS):
        indices.delete_index(client, name)
    index = indices.physical_name(ALIAS, 1)
    options = ReaderOptions(bootstrap=bootstrap, registry=registry, topics=[topic],
                            on_poison="stop", batch_size=BULK, progress=False)
    sink, loop = options.reader(client, index, ALIAS)
    gctune.tune()  # as `bottler materialize search` and `bottler reindex` do
    meter = CpuMeter(cpu_roots or {}).start()
    own = _own_cpu()
    start = time.perf_counter()
    try:
        loop.run_until_caught_up(timeout=900)
    finally:
        sink.close()
    elapsed = time.perf_counter() - start
    cpu = meter.note() + f", materializer (this process) {_own_cpu() - own:.1f}"
    _check_count(client, index, rows)
    indices.delete_index(client, index)
    return Figure(
        "search materializer rebuild from zero: consume → index, caught up", rows / elapsed,
        "docs/s", ceiling=ceiling, target=Target(">=", 0.8, of="ratio"),
        notes=[f"{rows:,} rows in {elapsed:.1f} s ({sink.requests} bulk requests, "
               f"{sink.flushes} flushes, each followed by its offsets document); "
               "document count checked; the broker serves the topic's fetches too", cpu],
    )


def search(client: SearchClient | str, bootstrap: str, registry: str, topic: str, rows: int,
           cpu_roots: dict[str, int | None] | None = None) -> list[Figure]:
    """The figures for ``topic`` (``rows`` upserts, already captured): the raw ``_bulk``
    ceiling, then the materializer's rebuild against it. ``cpu_roots``: process ids to report
    the CPU seconds of (``{"broker": pid, "search engine": pid}``)."""
    client = SearchClient(client) if isinstance(client, str) else client
    # The engine's JIT warms over about a million documents (a cold pass of 200k cost it 4× the
    # CPU of a warm one): untimed, or the first figure taken would carry it all.
    _say("search: warming the engine (a raw _bulk pass, not timed)")
    raw_bulk(client, bootstrap, registry, topic, rows)
    _say("search: raw _bulk ceiling")
    ceiling = raw_bulk(client, bootstrap, registry, topic, rows, cpu_roots)
    _say("search: materializer rebuild from zero")
    return [ceiling, materialized(client, bootstrap, registry, topic, rows, ceiling, cpu_roots)]


def _own_cpu() -> float:
    """CPU seconds of this process alone (its threads; not the stack it may have started)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _check_count(client: SearchClient, index: str, rows: int) -> None:
    client.refresh(index)
    count = client.request("GET", f"/{quote(index)}/_count")["count"]
    if count != rows:
        raise RuntimeError(f"{index} holds {count:,} documents, not {rows:,}")


def _say(what: str) -> None:
    print(f"bench {time.strftime('%H:%M:%S')}: {what}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    from compose.stack import isolated_stack
    from tests.bench import data
    from tests.bench.kafka import expect_messages
    from tests.bench.procs import SNAPSHOT_DONE, CaptureProcess, running
    from tests.bench.report import code_line, machine_line, print_report

    parser = argparse.ArgumentParser(prog="python -m tests.bench.search", description=__doc__)
    parser.add_argument("--rows", type=int, default=ROWS, help=f"rows [{ROWS:,}]")
    args = parser.parse_args(argv)
    header = [code_line(), machine_line() + " at the start"]
    table, prefix = "bench_search", "bench_search"
    with isolated_stack() as stack:
        ep = stack.endpoints
        _say(f"filling {table} with {args.rows:,} rows, then a capture snapshot")
        data.create_table(ep.pg_dsn, table)
        data.fill(ep.pg_dsn, table, 1, args.rows)
        capture = CaptureProcess("search-source", {
            "BOTTLER_PG_DSN": ep.pg_dsn, "BOTTLER_KAFKA": ep.kafka,
            "BOTTLER_REGISTRY": ep.registry,
        }, ["--tables", f"public.{table}", "--slot", prefix, "--topic-prefix", prefix])
        with running(capture):
            capture.wait_line(SNAPSHOT_DONE, timeout=600)
        topic = f"{prefix}.{table}"
        expect_messages(ep.kafka, topic, args.rows)
        figures = search(ep.search, ep.kafka, ep.registry, topic, args.rows,
                         {"broker": stack.broker.running_pid(),
                          "search engine": stack.search_engine.running_pid()})
    header.append(machine_line() + " at the end")
    print_report(figures, header)


if __name__ == "__main__":
    main()
