"""The search materializer: values and mappings, the CLI with a mapping file and a transform,
documents the cluster refuses, and retries when it is overloaded (429 from a proxy in front of
the real search API)."""

from __future__ import annotations

import http.server
import json
import threading
import urllib.request
import uuid
from decimal import Decimal
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from bottler.cli import app
from compose import search_engine
from materializers.core import Change, RejectedChange, TableId
from materializers.search import fields, indices
from materializers.search.bulk import Action, bulk_answer
from materializers.search.client import SearchClient, SearchError
from materializers.search.documents import document_id, key_text
from materializers.search.sink import SearchSink
from tests.support.conformance_search import documents
from tests.support.databases import execute
from tests.support.waiting import wait_streaming

# -- values -------------------------------------------------------------------------------


def test_values_become_json_a_search_cluster_indexes():
    assert fields.date_json(0) == "1970-01-01"
    assert fields.date_json(-719163) == -719163 * 86_400_000  # 0001-12-31 BC: epoch millis
    assert fields.date_json(2147483647) == 2147483647 * 86_400_000  # infinity sorts last
    assert fields.timestamp_json(1717243200500000) == "2024-06-01T12:00:00.500000Z"
    assert fields.local_json(-1) == "1969-12-31T23:59:59.999999"
    assert fields.time_json(86_400_000_000) == "24:00:00.000000"
    assert fields.float_json(float("nan")) == "NaN" and fields.float_json(1.5) == 1.5
    assert key_text({"id": 42}) == "42"
    assert key_text({"order": 7, "line": 3}) == "[7,3]"
    assert key_text({"price": Decimal("1.50")}) == "1.50"
    change = Change("p.t", TableId("public", "t"), "upsert", {"k": "x" * 600}, {}, 0, 1)
    assert document_id(change).startswith("public.t:#") and len(document_id(change)) < 100
    unkeyed = Change("p.log", TableId("s", "log"), "upsert", None, {}, 2, 9)
    assert document_id(unkeyed) == "s.log:@p.log/2/9"


def test_bulk_lines_are_json_whatever_a_transform_returns():
    """orjson writes the bulk body; what it refuses goes through the standard library."""
    doc = {"title": "é", "n": 2**70, 3: "key not a string", "at": None}
    meta, body = Action("public.t:1", doc, 12, None).lines().decode().splitlines()
    assert json.loads(meta) == {"index": {"_id": "public.t:1", "version": 12,
                                          "version_type": "external_gte"}}
    assert json.loads(body) == {"title": "é", "n": 2**70, "3": "key not a string", "at": None}
    assert Action("public.t:2", None, 5, None).lines() == (
        b'{"delete":{"_id":"public.t:2","version":5,"version_type":"external_gte"}}\n')
    assert bulk_answer(b'{"errors":false,"items":[{"index":{"status":201}}]}') == {
        "errors": False}
    assert bulk_answer(b'{"errors":true,"items":[{"index":{"status":409}}]}')["items"] == [
        {"index": {"status": 409}}]


def _f(name, avro, pg_type):
    return {"name": name, "type": ["null", avro], "pg.name": name, "pg.type": pg_type}


KINDS = {"type": "record", "name": "kinds", "namespace": "public", "pg.schema": "public",
         "pg.table": "kinds", "fields": [
             _f("id", "int", "integer"),
             _f("title", "string", "text"),
             _f("code", {"type": "string", "logicalType": "uuid"}, "uuid"),
             _f("price", {"type": "bytes", "logicalType": "decimal", "precision": 10,
                          "scale": 2}, "numeric(10,2)"),
             _f("big", "string", "numeric"),
             _f("at", {"type": "long", "logicalType": "timestamp-micros"},
                "timestamp with time zone"),
             _f("day", {"type": "int", "logicalType": "date"}, "date"),
             _f("ok", "boolean", "boolean"),
             _f("doc", "string", "jsonb"),
             _f("tags", {"type": "array", "items": ["null", "string"]}, "text[]"),
             _f("raw", "bytes", "bytea"),
             _f("score", "double", "double precision")]}


def test_the_mapping_follows_the_avro_schema():
    from materializers.search.documents import Layout

    layout = Layout.of(KINDS, "flattened")
    types = {name: m.get("type") for name, m in layout.properties.items()}
    assert types == {"id": "long", "title": "text", "code": "keyword",
                     "price": "scaled_float", "big": "double", "at": "date", "day": "date",
                     "ok": "boolean", "doc": "flattened", "tags": "text", "raw": "binary",
                     "score": "double"}
    assert layout.properties["title"]["fields"]["keyword"]["type"] == "keyword"
    assert layout.properties["price"]["scaling_factor"] == 100
    doc = layout.document({"id": 1, "title": "t", "code": "c", "price": Decimal("2.50"),
                           "big": "1e400", "at": 0, "day": 1, "ok": True, "doc": '{"a": [1]}',
                           "tags": ["x", None], "raw": b"\x00\xff", "score": float("inf")},
                          "public.kinds")
    assert doc == {"id": 1, "title": "t", "code": "c", "price": 2.5, "big": "1e400",
                   "at": "1970-01-01T00:00:00.000000Z", "day": "1970-01-02", "ok": True,
                   "doc": {"a": [1]}, "tags": ["x", None], "raw": "AP8=", "score": "Infinity",
                   "_bottler_table": "public.kinds"}


# -- against the search API ----------------------------------------------------------------


@pytest.fixture
def index(client):
    name = f"t-{uuid.uuid4().hex[:8]}"
    yield name
    for physical in indices.versions(client, name):  # the alias goes with its index
        indices.delete_index(client, physical)
    indices.delete_index(client, name)


KINDS_TABLE = TableId("public", "kinds")


def upsert(offset, row, schema=KINDS) -> Change:
    return Change("p.kinds", KINDS_TABLE, "upsert", {"id": row["id"]}, row, 0, offset,
                  value_schema_id=900 + len(schema["fields"]), value_schema=schema)


def row(id_, **values):
    base = {f["name"]: None for f in KINDS["fields"]}
    return base | {"id": id_} | values


def test_every_kind_of_value_is_indexed_and_searchable(client, index):
    flavour = client.flavour()
    # the embedded stack's engine (compose/search_engine.py)
    assert (flavour.name, flavour.major, flavour.flattened) == (
        "opensearch", search_engine.engine().major, "flat_object")
    sink = SearchSink(client, index)
    changes = [upsert(0, row(1, title="Red running shoes", code="a0eebc99", price=Decimal("59.90"),
                             at=1717243200000000, day=19875, ok=True,
                             doc='{"color": "red", "size": {"eu": 42}}', tags=["sport", "red"],
                             raw=b"hi", score=float("nan"))),
               upsert(1, row(2, title="Blue socks", price=Decimal("4.00"), day=2147483647,
                             doc="[1, 2]"))]
    sink.write(changes, {("p.kinds", 0): 2})
    sink.flush()
    client.refresh(index)

    def ids(query):
        hits = client.request("POST", f"/{index}/_search", {"query": query})["hits"]["hits"]
        return sorted(h["_source"]["id"] for h in hits)

    assert ids({"match": {"title": "running"}}) == [1]
    assert ids({"term": {"title.keyword": "Blue socks"}}) == [2]
    assert ids({"range": {"price": {"gte": 10}}}) == [1]
    assert ids({"range": {"at": {"gte": "2024-06-01T00:00:00Z", "lt": "2024-06-02"}}}) == [1]
    assert ids({"range": {"day": {"gt": "2100-01-01"}}}) == [2]  # infinity, as epoch millis
    assert ids({"term": {"doc.color": "red"}}) == [1]  # the jsonb document, flattened
    assert ids({"term": {"doc.value": "2"}}) == [2]  # JSON not an object: under "value"
    assert ids({"term": {"tags": "sport"}}) == [1]
    assert ids({"term": {"ok": True}}) == [1]
    assert sink.stored_offsets([("p.kinds", 0)]) == {("p.kinds", 0): 2}


DOUBLES = [93732.31052470315, 0.1 + 0.2, 5e-324, 1.7976931348623157e308, -2.2250738585072014e-308,
           123456789.12345679, 1 / 3]


def test_doubles_read_back_exactly(client, index):
    """The engine keeps ``_source`` as sent: every double reads back with every digit (no
    tolerance anywhere)."""
    sink = SearchSink(client, index)
    sink.write([upsert(i, row(i, score=value)) for i, value in enumerate(DOUBLES)],
               {("p.kinds", 0): len(DOUBLES)})
    sink.flush()
    read = {d["id"]: d["score"] for d in documents(sink, KINDS_TABLE)}
    assert [repr(read[i]) for i in range(len(DOUBLES))] == [repr(v) for v in DOUBLES]


def test_a_document_the_cluster_refuses_is_a_rejected_change_and_the_rest_is_written(
        client, index):
    definition = {"mappings": {"properties": {"title": {"type": "integer"}}}}  # overridden
    sink = SearchSink(client, index, definition=definition)
    good, bad = upsert(0, row(1, title="12")), upsert(1, row(2, title="not a number"))
    sink.write([good, bad], {("p.kinds", 0): 2})
    with pytest.raises(RejectedChange) as refused:
        sink.flush()
    assert refused.value.change is bad and "title" in refused.value.reason
    assert [d["id"] for d in documents(sink, TableId("public", "kinds"))] == [1]
    assert sink.stored_offsets([("p.kinds", 0)]) == {}  # the batch is replayed at restart
    sink.write([good], {("p.kinds", 0): 2})  # without the rejected row, as the loop does
    sink.flush()
    assert sink.stored_offsets([("p.kinds", 0)]) == {("p.kinds", 0): 2}


class Overloaded(http.server.ThreadingHTTPServer):
    """A proxy to the search API that answers the first ``busy`` bulk requests with 429, and
    then marks the first item of the next bulk answer as 429 (a partial failure)."""

    def __init__(self, upstream: str, busy: int):
        self.upstream = upstream
        self.busy = busy
        self.item_busy = 1
        self.bulks = 0
        super().__init__(("127.0.0.1", 0), _Proxy)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Proxy(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _forward(self):
        server: Overloaded = self.server  # type: ignore[assignment]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        bulk = self.path.split("?")[0].endswith("/_bulk")
        if bulk:
            server.bulks += 1
            if server.busy > 0:
                server.busy -= 1
                return self._answer(429, b'{"error":{"type":"es_rejected_execution_exception",'
                                         b'"reason":"queue full"},"status":429}')
        request = urllib.request.Request(server.upstream + self.path, data=body,
                                         method=self.command,
                                         headers={"Content-Type": self.headers["Content-Type"]
                                                  or "application/json"})
        try:
            with urllib.request.urlopen(request) as response:
                status, data = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, data = exc.code, exc.read()
        if bulk and server.item_busy > 0 and status == 200:
            answer = json.loads(data)
            op, = answer["items"][0]
            answer["items"][0][op] = {"status": 429, "error": {"type": "rejected"}}
            answer["errors"] = True
            server.item_busy -= 1
            data = json.dumps(answer).encode()
        self._answer(status, data)

    def _answer(self, status, data):
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _forward


def test_429s_and_partial_bulk_failures_are_retried_with_backoff(stack, client, index):
    proxy = Overloaded(stack.search_url, busy=2)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        counted = SearchClient(proxy.url, backoff=0.01)
        sink = SearchSink(counted, index, concurrency=1)
        sink.bulk.backoff = 0.01
        sink.write([upsert(i, row(i, title=f"t{i}")) for i in range(10)], {("p.kinds", 0): 10})
        sink.flush()
        # two requests refused whole, one answered with its first item refused, one retry
        assert proxy.bulks == 4
        assert counted.refused == {429: 3}  # two requests, a bulk with one item refused
        assert sorted(d["id"] for d in documents(sink, TableId("public", "kinds"))) == \
            list(range(10))
    finally:
        proxy.shutdown()


def test_stale_writes_never_overwrite_newer_ones(client, index):
    sink = SearchSink(client, index)
    sink.write([upsert(5, row(1, title="newer"))], {("p.kinds", 0): 6})
    sink.flush()
    other = SearchSink(client, index)  # e.g. a replay from an older offset
    other.write([upsert(3, row(1, title="older"))], {("p.kinds", 0): 4})
    other.flush()
    other.write([Change("p.kinds", TableId("public", "kinds"), "delete", {"id": 1}, None, 0, 4)],
                {("p.kinds", 0): 5})
    other.flush()
    assert [d["title"] for d in documents(sink, TableId("public", "kinds"))] == ["newer"]
    assert other.stale == 2


def test_the_engines_version_conflicts_are_stale_writes_not_failures(client, index):
    """The engine's own 409 answers (version_conflict_engine_exception per bulk item) are what
    the sink counts as stale: the document keeps its newer version and text."""
    sink = SearchSink(client, index)
    sink.write([upsert(9, row(1, title="newest"))], {("p.kinds", 0): 10})
    sink.flush()
    doc_id = quote(document_id(upsert(9, row(1))), safe="")
    stale = client.request("PUT", f"/{index}/_doc/{doc_id}", {"title": "old"},
                           params={"version": 3, "version_type": "external_gte"}, ok=(409,))
    assert stale["error"]["type"] == "version_conflict_engine_exception"
    sink.write([upsert(4, row(1, title="replayed"))], {("p.kinds", 0): 5})
    sink.flush()
    assert sink.stale == 1
    assert [d["title"] for d in documents(sink, KINDS_TABLE)] == ["newest"]


def test_a_rebuilds_refresh_is_off_and_given_back_as_the_mapping_file_set_it(client, index):
    name = f"{index}-1"
    indices.create_index(client, name, {"settings": {"index": {"refresh_interval": "7s"}}})
    setting = f"/{name}/_settings/index.refresh_interval"

    def interval():
        return client.request("GET", setting)[name]["settings"]["index"]["refresh_interval"]

    previous = indices.pause_refresh(client, name)
    assert (previous, interval()) == ("7s", "-1")
    indices.resume_refresh(client, name, previous)
    assert interval() == "7s"
    other = f"{index}-2"  # the engine's default: no setting before, none after
    indices.create_index(client, other, {})
    indices.resume_refresh(client, other, indices.pause_refresh(client, other))
    assert client.request("GET", f"/{other}/_settings/index.refresh_interval") in (
        {}, {other: {"settings": {}}})  # OpenSearch leaves the index out, Elasticsearch not


def test_a_mapping_the_engine_refuses_is_one_line_and_creates_nothing(client, index):
    with pytest.raises(SearchError) as refused:
        indices.create_index(client, index, {"mappings": {"properties": {
            "price": {"type": "scaled_float"}}}})  # no scaling_factor
    assert str(refused.value).startswith(f"the search engine refuses the definition of {index}: ")
    assert "scaling_factor" in str(refused.value) and "--mapping" in refused.value.hint
    assert not client.exists(index)
    indices.create_index(client, index, {"mappings": {"properties": {"n": {"type": "long"}}}})
    with pytest.raises(SearchError) as conflict:  # a type change needs a new index: a reindex
        client.request("PUT", f"/{index}/_mapping", {"properties": {"n": {"type": "text"}}})
    assert conflict.value.error_type == "illegal_argument_exception"


TRANSFORM = '''
def shape(doc, change):
    if doc["name"] == "hidden":
        return None
    doc["label"] = doc.pop("name").upper()
    return doc
'''


def test_the_cli_with_a_mapping_file_a_transform_and_status(stack, source, prefix, start,
                                                           client, index, tmp_path, monkeypatch):
    execute(source, "create table items (id int primary key, name text, sku text)",
            "insert into items values (1, 'shoe', 'A-1'), (2, 'hidden', 'B-2'),"
            " (3, 'sock', 'C-3')")
    start()
    wait_streaming(source, prefix)
    (tmp_path / "shape_items.py").write_text(TRANSFORM)
    monkeypatch.syspath_prepend(str(tmp_path))
    mapping = tmp_path / "mapping.json"
    mapping.write_text(json.dumps({"settings": {"number_of_shards": 1},
                                   "mappings": {"properties": {"sku": {"type": "text"}}}}))
    env = {"BOTTLER_KAFKA": stack.kafka, "BOTTLER_REGISTRY": stack.registry_url,
           "BOTTLER_SEARCH": stack.search_url}
    runner = CliRunner()
    result = runner.invoke(app, ["materialize", "search", "--index", index, "--topic-prefix",
                                 prefix, "--mapping", str(mapping), "--transform",
                                 "shape_items:shape", "--once"], env=env)
    assert result.exit_code == 0, result.output
    physical = indices.alias_target(client, index)
    assert physical == f"{index}-1"
    client.refresh(index)
    hits = client.request("POST", f"/{index}/_search", {"query": {"match_all": {}}})
    assert sorted((h["_id"], h["_source"].get("label")) for h in hits["hits"]["hits"]) == [
        ("public.items:1", "SHOE"), ("public.items:3", "SOCK")]
    properties = client.request("GET", f"/{physical}/_mapping")[physical]["mappings"][
        "properties"]
    assert properties["sku"] == {"type": "text"}  # the mapping file wins over the derived one
    assert properties["name"]["type"] == "text"
    result = runner.invoke(app, ["reindex", index, "--status"], env=env)
    assert result.exit_code == 0, result.output
    assert f"{index}-1" in result.output and "yes" in result.output
    result = runner.invoke(app, ["materialize", "search", "--index", index, "--transform",
                                 "nowhere:f", "--once"], env=env)
    assert result.exit_code != 0 and "cannot import" in str(result.exception)
    mapping.write_text(json.dumps({"mappings": {"properties": {"sku": {"type": "sku_code"}}}}))
    for command in (["materialize", "search", "--index", f"{index}-x", "--once"],
                    ["reindex", index]):  # a mapping the engine refuses: one line, no index
        result = runner.invoke(app, [*command, "--topic-prefix", prefix, "--mapping",
                                     str(mapping)], env=env)
        refused = result.exception
        assert isinstance(refused, SearchError), result.output
        assert refused.message.startswith("the search engine refuses the definition of ")
        assert "sku_code" in refused.message and "\n" not in refused.message
    assert not client.exists(f"{index}-x") and not client.exists(f"{index}-2")
