"""Three captures on one broker — prefixes `a…`, `b…` and the empty prefix, each with its own slot
and source database, two of them with a table `public.sc` of different column types — beside
topics bottler did not write (non-Avro bytes: `order-events-…`, a topic named like a table under
another prefix, one under prefix `a…` itself). Each capture has its own replica and search index;
all three load into one warehouse path. Each view equals its own source, reads exactly its
capture's table topics (and truncate topic), dead-letters nothing, and picks up a table its
capture starts capturing while it runs (issue 15, item 3)."""

from __future__ import annotations

import uuid
from contextlib import ExitStack

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from capture.setup.state import CaptureState, TopicOwnership
from capture.setup.topics import ensure_topics
from common.errors import BottlerError
from materializers.core import Materializer
from materializers.core.ownership import OwnedTopics
from materializers.postgres import PostgresSink
from materializers.search.client import SearchClient
from materializers.search.reader import LiveReader, ReaderOptions
from schemas import ownership
from tests.support.databases import execute, fresh_database
from tests.support.replica import same
from tests.support.topics import read_topic
from tests.support.waiting import in_thread, wait_for, wait_streaming

SC_TEXT = """
create table sc (id int primary key, v text);
insert into sc select g, 'text ' || g from generate_series(1, 30) g;
create table items (id int primary key, name text);
insert into items select g, 'item ' || g from generate_series(1, 20) g;
"""
SC_INT = """
create table sc (id int primary key, v int);
insert into sc select g, g * 100 from generate_series(1, 25) g;
create table orders (id int primary key, total int);
insert into orders select g, g from generate_series(1, 10) g;
"""


class Capture:
    """One capture and what is known of its source."""

    def __init__(self, prefix: str, slot: str, source: str, tables: list[str]):
        self.prefix, self.slot, self.source, self.tables = prefix, slot, source, tables

    def topic(self, table: str) -> str:
        return f"{self.prefix}.{table}" if self.prefix else table

    @property
    def topics(self) -> set[str]:
        return {self.topic(t) for t in self.tables}

    @property
    def truncate_topic(self) -> str:
        return f"{self.prefix}._bottler.truncate" if self.prefix else "_bottler.truncate"

    @property
    def dead_letter_topic(self) -> str:
        return f"{self.prefix}._bottler.dead-letter" if self.prefix else "_bottler.dead-letter"


def unrelated_topics(stack, names: list[str]) -> None:
    """Topics bottler did not write, holding bytes no Avro reader takes."""
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    for future in admin.create_topics([NewTopic(n, num_partitions=1) for n in names]).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": stack.kafka})
    for name in names:
        for i in range(3):
            producer.produce(name, key=f"k{i}".encode(), value=b'{"not": "avro"}')
    assert producer.flush(30) == 0


def documents(client: SearchClient, alias: str, table: str) -> dict:
    """id -> document of ``public.<table>`` in the index behind ``alias``."""
    client.request("POST", f"/{alias}/_refresh")
    answer = client.request("POST", f"/{alias}/_search", {
        "size": 10000, "query": {"term": {"_bottler_table": f"public.{table}"}}})
    return {hit["_source"]["id"]: hit["_source"] for hit in answer["hits"]["hits"]}


def source_rows(dsn: str, table: str, column: str) -> dict:
    import psycopg

    with psycopg.connect(dsn) as conn:
        return dict(conn.execute(f"select id, {column} from {table}").fetchall())


def test_three_captures_on_one_broker_each_view_reads_only_its_own(stack, source, start, spark,
                                                                   tmp_path):
    run = uuid.uuid4().hex[:8]
    solo = f"solo_{run}"  # the empty prefix's table: a topic name no other test uses
    with ExitStack() as dbs:
        b_source, e_source = (dbs.enter_context(fresh_database(stack.pg_dsn)) for _ in range(2))
        targets = [dbs.enter_context(fresh_database(stack.pg_dsn)) for _ in range(3)]
        a = Capture(f"a{run}", f"a{run}", source, ["sc", "items"])
        b = Capture(f"b{run}", f"b{run}", b_source, ["sc", "orders"])
        e = Capture("", f"e{run}", e_source, [solo])
        captures = [a, b, e]
        execute(a.source, SC_TEXT)
        execute(b.source, SC_INT)
        execute(e.source, f"create table {solo} (id int primary key, v text)",
                f"insert into {solo} select g, 'solo ' || g from generate_series(1, 15) g")
        # bottler wrote none of these: no view may read them
        foreign = [f"order-events-{run}", f"x{run}.sc", f"{a.prefix}.stray"]
        unrelated_topics(stack, foreign)
        for c in captures:  # stopped before their databases are dropped
            dbs.callback(start(postgres=c.source, slot=c.slot, topic_prefix=c.prefix).stop)
        for c in captures:
            wait_streaming(c.source, c.slot)

        client = SearchClient(stack.search_url)
        aliases = {c.slot: f"apart-{c.slot}" for c in captures}
        loops: dict[str, list[Materializer]] = {c.slot: [] for c in captures}
        with ExitStack() as views:
            for c, target in zip(captures, targets, strict=True):
                sink = PostgresSink(target, f"g-{c.slot}")
                views.callback(sink.close)
                replica = Materializer(sink, bootstrap=stack.kafka, registry=stack.registry_url,
                                       group_id=sink.group_id, prefix=c.prefix,
                                       batch_timeout=0.2, progress=False)
                reader = LiveReader(client, aliases[c.slot], ReaderOptions(
                    bootstrap=stack.kafka, registry=stack.registry_url, prefix=c.prefix,
                    progress=False, loop_options={"batch_timeout": 0.2}))
                views.enter_context(in_thread(replica.run))
                views.enter_context(in_thread(reader.run))
                loops[c.slot] = [replica, reader]

            execute(a.source, "update sc set v = 'changed' where id = 3",
                    "delete from items where id > 15")
            execute(b.source, "update sc set v = -1 where id = 4", "delete from sc where id = 25")
            execute(e.source, f"delete from {solo} where id = 1")
            # a table the capture of `a` starts capturing while it and its views run
            execute(a.source, "create table added (id int primary key, note text)",
                    "insert into added select g, 'added ' || g from generate_series(1, 12) g")
            a.tables.append("added")

            def replicas_equal() -> bool:
                for c, target in zip(captures, targets, strict=True):
                    for table in c.tables:
                        try:
                            if not same(c.source, target, f"select * from {table} order by id"):
                                return False
                        except Exception:  # noqa: BLE001 - not created in the target yet
                            return False
                return True

            def search_equal() -> bool:
                for c in captures:
                    for table in c.tables:
                        column = {"items": "name", "orders": "total", "added": "note"}.get(
                            table, "v")
                        try:
                            docs = documents(client, aliases[c.slot], table)
                        except Exception:  # noqa: BLE001 - the index not there yet
                            return False
                        if {k: d.get(column) for k, d in docs.items()} != source_rows(
                                c.source, table, column):
                            return False
                return True

            # what the capture of `a` says it owns: every table topic, `added` included
            owned = ownership.owned(CaptureState(stack.kafka, a.prefix).read_all())
            assert owned[a.topic("sc")] == {
                "kind": "table-topic", "prefix": a.prefix, "slot": a.slot, "schema": "public",
                "table": "sc", "topic": a.topic("sc"), "key_columns": ["id"], "format": "avro"}
            wait_for(lambda: set(ownership.owned(CaptureState(
                stack.kafka, a.prefix).read_all())) == a.topics, 60, "the ownership of added")
            wait_for(replicas_equal, 120, "every replica to equal its source")
            wait_for(search_equal, 120, "every search index to equal its source")
            for c in captures:
                for loop in loops[c.slot]:
                    read = {t for t, _ in (loop.lag() if isinstance(loop, Materializer)
                                           else loop.loop.lag())}
                    if c.prefix:
                        assert read <= c.topics | {c.truncate_topic}, (c.slot, read)
                        assert c.topics <= read, (c.slot, read)
                    else:  # the empty prefix is shared by the session's other tests' captures
                        assert c.topics <= read, read
                        assert not read & ({t for o in (a, b) for t in o.topics}
                                           | set(foreign)), read

        # The warehouse: all three into one path; a's and b's `public.sc` kept apart.
        from materializers.warehouse.delta import open_table
        from materializers.warehouse.job import WarehouseJob, prefix_root

        path = tmp_path / "warehouse"
        for c in captures:
            job = WarehouseJob(spark, str(path), bootstrap=stack.kafka,
                               registry=stack.registry_url, prefix=c.prefix,
                               name=f"warehouse-{c.slot}")
            try:
                result = job.run_until_caught_up()
                read = {t for t, _ in result.offsets}
            finally:
                job.close()
            assert result.dead_letters == 0
            if c.prefix:
                assert read == c.topics | {c.truncate_topic}, (c.slot, read)
            else:
                assert c.topics <= read and not read & set(foreign), read
            for table in c.tables:
                column = {"items": "name", "orders": "total", "added": "note"}.get(table, "v")
                delta = open_table(prefix_root(path, c.prefix) / "public" / table)
                assert delta is not None, (c.slot, table)
                rows = delta.to_pyarrow_table(columns=["id", column]).to_pylist()
                assert {r["id"]: r[column] for r in rows} == source_rows(
                    c.source, table, column), (c.slot, table)
        assert (path / a.prefix / "public" / "sc").is_dir()
        assert (path / b.prefix / "public" / "sc").is_dir()

        # Two captures' `public.sc` into one replica target, or one index: refused in one line.
        sink = PostgresSink(targets[0], f"g-other-{run}")
        try:
            other = Materializer(sink, bootstrap=stack.kafka, registry=stack.registry_url,
                                 group_id=sink.group_id, topics=[b.topic("sc")], prefix=b.prefix,
                                 batch_timeout=0.2, progress=False, on_poison="stop")
            with pytest.raises(BottlerError, match=f"target table public.sc is fed by topic "
                               f"{a.topic('sc')}, and topic {b.topic('sc')} names the same"):
                other.run_until_caught_up(60)
        finally:
            sink.close()
        assert same(a.source, targets[0], "select * from sc order by id")  # untouched
        both = LiveReader(client, f"apart-both-{run}", ReaderOptions(
            bootstrap=stack.kafka, registry=stack.registry_url, prefix=a.prefix,
            topics=[a.topic("sc"), b.topic("sc")], progress=False, on_poison="stop"))
        with pytest.raises(BottlerError, match="both hold table public.sc"):
            both.run_until_caught_up(60)

        # Nothing was dead-lettered, and nothing of the foreign topics reached a view.
        for c in (a, b):
            listed = AdminClient({"bootstrap.servers": stack.kafka}).list_topics(timeout=10)
            if c.dead_letter_topic in listed.topics:
                assert read_topic(stack.kafka, c.dead_letter_topic) == []
        listed = AdminClient({"bootstrap.servers": stack.kafka}).list_topics(timeout=10)
        if e.dead_letter_topic in listed.topics:
            mine = e.topics | set(foreign)
            origins = {dict(m.headers() or []).get("bottler.topic", b"").decode()
                       for m in read_topic(stack.kafka, e.dead_letter_topic)}
            assert not origins & mine, origins


def test_a_capture_that_recorded_no_ownership_is_said_once_and_read_once_it_does(stack, caplog):
    """A view of a capture from before the records reads no topic and says why, once; the
    records, once written, are what it reads (a topic under the prefix they do not name is not).
    """
    prefix = f"old{uuid.uuid4().hex[:8]}"
    state = CaptureState(stack.kafka, prefix)
    ensure_topics(AdminClient({"bootstrap.servers": stack.kafka}), [state.topic])
    state.write(prefix, snapshot="complete")  # progress, as an earlier version recorded it
    owned = OwnedTopics(stack.kafka, prefix, "view")
    try:
        with caplog.at_level("INFO", logger="materializers"):
            assert owned.refresh() == set() and owned.refresh() == set()
            said = [r.getMessage() for r in caplog.records if "ownership" in r.getMessage()]
            assert said == [f"view: no topic ownership records in {prefix}._bottler.capture "
                            f"yet: if the capture of prefix {prefix} is of an earlier version "
                            "of bottler, restart it with this one (it records its table topics "
                            "there), or give the topics with --topic; reading no table topic "
                            "until then"]
            assert owned.complete  # read to the end: a view is caught up with nothing
            TopicOwnership(state, prefix, prefix, "avro").claim("public", "t", f"{prefix}.t",
                                                                ["id"])
            assert owned.refresh() == {f"{prefix}.t"}
            assert owned(f"{prefix}.t") and not owned(f"{prefix}.stray")
    finally:
        owned.close()
        state.close()
