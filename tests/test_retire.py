"""`bottler retire` against the session's real stack: a capture with a replica and a search index
is retired, and exactly its topics, subjects, slot, publications, search index and stored
offsets go; another prefix's capture, another capture with the empty prefix and an unrelated
topic are untouched. A replica still running when its topics go logs one line for each, not one
per poll."""

from __future__ import annotations

import logging
import time
import uuid

import psycopg
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import SchemaRegistryClient
from typer.testing import CliRunner

from bottler.cli import app
from materializers.core import watermarks
from materializers.search import indices
from materializers.search.client import SearchClient
from tests.support.databases import execute, rows
from tests.support.replica import replica
from tests.support.waiting import wait_for, wait_streaming


def topics(stack) -> set[str]:
    return set(AdminClient({"bootstrap.servers": stack.kafka}).list_topics(timeout=10).topics)


def create_topic(stack, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": stack.kafka})  # held until the topic exists
    admin.create_topics([NewTopic(name, num_partitions=1)])[name].result(30)


def subjects(stack) -> set[str]:
    return set(SchemaRegistryClient({"url": stack.registry_url}).get_subjects())


def slots(dsn: str) -> set[str]:
    return {r[0] for r in rows(dsn, "select slot_name from pg_replication_slots")}


def publications(dsn: str) -> set[str]:
    return {r[0] for r in rows(dsn, "select pubname from pg_publication")}


def retire(stack, *args: str, source: str):
    env = {"BOTTLER_KAFKA": stack.kafka, "BOTTLER_REGISTRY": stack.registry_url,
           "BOTTLER_PG_DSN": source}
    return CliRunner().invoke(app, ["retire", *args], env=env)


def test_retire_removes_one_capture_and_nothing_else(stack, source, prefix, start, target,
                                                     caplog):
    execute(source, "create table items (id int primary key, name text)",
            "create table notes (body text)",  # unkeyed: the second publication
            "insert into items values (1, 'shoe'), (2, 'sock')", "insert into notes values ('n')")
    mine = start(allow_unkeyed=True)
    other, empty = f"o{uuid.uuid4().hex[:8]}", f"e{uuid.uuid4().hex[:8]}"
    start(slot=other, topic_prefix=other, allow_unkeyed=True)
    # the empty prefix owns `items` and `notes`, not `<prefix>.items`
    start(slot=empty, topic_prefix="", allow_unkeyed=True)
    for slot in (prefix, other, empty):
        wait_streaming(source, slot)
    unrelated = f"unrelated-{uuid.uuid4().hex[:8]}"
    create_topic(stack, unrelated)
    owned = {f"{prefix}.items", f"{prefix}.notes", f"{prefix}._bottler.capture",
             f"{prefix}._bottler.truncate", f"{prefix}._bottler.heartbeat"}
    kept = {f"{other}.items", f"{other}._bottler.capture", "items", "notes", "_bottler.capture",
            unrelated}
    wait_for(lambda: owned | kept <= topics(stack), 60, "every capture's topics")
    assert {f"{prefix}.items-value", f"{prefix}.items-key"} <= subjects(stack)

    env = {"BOTTLER_KAFKA": stack.kafka, "BOTTLER_REGISTRY": stack.registry_url,
           "BOTTLER_SEARCH": stack.search_url}
    alias = f"retire-{prefix}"
    result = CliRunner().invoke(app, ["materialize", "search", "--index", alias,
                                      "--topic-prefix", prefix, "--once"], env=env)
    assert result.exit_code == 0, result.output
    client = SearchClient(stack.search_url)
    assert indices.alias_target(client, alias) == f"{alias}-1"

    with replica(stack, target, prefix, group="g-retire") as (_, m, failure):
        wait_for(lambda: rows(target, "select count(*) from bottler.offsets"
                              " where next_offset > 0")[0][0] >= 2, 60, "the replica's offsets")
        wait_for(lambda: sorted(rows(target, "select id from items")) == [(1,), (2,)], 60,
                 "the replica")
        # A running capture holds the slot: refused, nothing removed.
        result = retire(stack, "-p", prefix, "-s", prefix, "--yes", source=source)
        assert result.exit_code != 0 and f"slot {prefix} is in use" in str(result.exception)
        mine.stop()
        wait_for(lambda: not rows(source, "select 1 from pg_replication_slots where "
                                  f"slot_name = '{prefix}' and active_pid is not null"), 30,
                 "the slot released")
        # No terminal to ask on and no --yes: refused in one line.
        result = retire(stack, "-p", prefix, "-s", prefix, "-t", target, source=source)
        assert result.exit_code != 0 and "no terminal" in str(result.exception)
        result = retire(stack, "-p", prefix, "-s", prefix, "-t", target, "--search",
                        stack.search_url, "--dry-run", source=source)
        assert result.exit_code == 0, result.output
        listed = {line.split()[1] for line in result.output.splitlines()
                  if line.startswith("  topic ")}
        assert listed == owned | {t for t in topics(stack) if t.startswith(f"{prefix}._")}
        assert f"search index {alias}-1" in result.output
        assert owned <= topics(stack)  # a dry run removes nothing

        caplog.clear()
        with caplog.at_level(logging.INFO, logger="materializers"):
            result = retire(stack, "-p", prefix, "-s", prefix, "-t", target, "--search",
                            stack.search_url, "--yes", source=source)
            assert result.exit_code == 0, result.output
            wait_for(lambda: any(f"{prefix}.items no longer" in r.getMessage()
                                 for r in caplog.records), 30, "the replica to see items go")
            seen = len(caplog.records)
            time.sleep(4)  # several watermark reads (one a second): none may log again
            later = [r.getMessage() for r in caplog.records[seen:]]
            gone = [r.getMessage() for r in caplog.records if "no longer exists" in r.message]
        assert not failure
    assert not [line for line in later if "unknown" in line or "no longer" in line], later
    per_topic = {line.split(" topic ")[1].split()[0] for line in gone}
    assert len(gone) == len(per_topic) and f"{prefix}.items" in per_topic, gone

    left = topics(stack)
    assert not {t for t in left if t.startswith(f"{prefix}.")}, left
    assert kept <= left
    assert not {s for s in subjects(stack) if s.startswith(f"{prefix}.")}
    assert {f"{other}.items-value", "items-value"} <= subjects(stack)
    assert prefix not in slots(source) and {other, empty} <= slots(source)
    assert not {prefix, f"{prefix}_unkeyed"} & publications(source)
    assert {other, empty} <= publications(source)
    with psycopg.connect(target) as conn:
        assert conn.execute("select count(*) from bottler.offsets where starts_with(topic, %s)",
                            (f"{prefix}.",)).fetchone()[0] == 0
    assert indices.alias_target(client, alias) is None and not client.exists(f"{alias}-1")
    assert indices.OffsetStore(client).get(f"{alias}-1") is None
    assert "deleted" in result.output

    # Nothing left: a second run says so.
    result = retire(stack, "-p", prefix, "-s", prefix, "--yes", source=source)
    assert result.exit_code == 0 and "nothing to retire" in result.output, result.output


def test_the_empty_prefix_takes_only_its_own_topics(stack, source, prefix, start):
    table = f"r{uuid.uuid4().hex[:8]}"
    execute(source, f"create table {table} (id int primary key)",
            f"insert into {table} values (1)")
    slot = f"e{uuid.uuid4().hex[:8]}"
    start(slot=slot, topic_prefix="", tables=[f"public.{table}"])
    start()  # the prefixed capture of the same table
    wait_streaming(source, slot)
    wait_streaming(source, prefix)
    unrelated = f"u{uuid.uuid4().hex[:8]}"  # a top-level topic bottler did not write
    create_topic(stack, unrelated)
    wait_for(lambda: {table, f"{prefix}.{table}", unrelated} <= topics(stack), 60, "topics")
    result = retire(stack, "-s", slot, "--dry-run", source=source)
    assert result.exit_code == 0, result.output
    listed = {line.split()[1] for line in result.output.splitlines()
              if line.startswith("  topic ")}
    assert table in listed and "_bottler.capture" in listed
    assert f"replication slot {slot} (in use by process" in result.output  # listed, not refused
    assert unrelated not in listed and not {t for t in listed if t.startswith(f"{prefix}.")}


def test_a_translator_stops_reading_a_deleted_input_with_one_line(stack, source, prefix, start,
                                                                  caplog):
    from tests.support.translate import ORDERS, running

    execute(source, ORDERS, "insert into orders (id, customer_id, total) values (1, 10, 2.5)")
    capture = start()
    wait_streaming(source, prefix)
    with caplog.at_level(logging.INFO, logger="materializers"), \
            running(stack, prefix, group_id=f"g-{uuid.uuid4().hex[:8]}") as (runner, failure):
        wait_for(lambda: failure or runner.caught_up.is_set(), 60, "the translator to catch up")
        capture.stop()
        admin = AdminClient({"bootstrap.servers": stack.kafka})
        admin.delete_topics([f"{prefix}.orders"])[f"{prefix}.orders"].result(30)
        wait_for(lambda: failure or any("no longer exists" in r.getMessage()
                                        for r in caplog.records), 30, "the translator's line")
        seen = len(caplog.records)
        time.sleep(4)  # several watermark reads (one a second): none may log again
        later = [r.getMessage() for r in caplog.records[seen:]]
        assert not failure, failure
    lines = [r.getMessage() for r in caplog.records if "no longer exists" in r.getMessage()]
    assert len(lines) == 1 and f"{prefix}.orders" in lines[0], lines
    assert not [line for line in later if "unknown" in line], later


def test_watermarks_name_deleted_topics_gone_whether_some_or_all_of_those_asked_are(stack,
                                                                                 prefix):
    """librdkafka answers a ListOffsets whose partitions are all gone with _NOENT ("No leaders
    found"), not UNKNOWN_TOPIC_OR_PART: a view that read only retired topics kept warning that
    their watermarks were unknown instead of dropping them."""
    kept, first, second = (f"{prefix}.{name}" for name in ("kept", "first", "second"))
    for name in (kept, first, second):
        create_topic(stack, name)
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    for future in admin.delete_topics([first, second]).values():
        future.result(30)
    reader = watermarks.Reader(stack.kafka)

    def read(asked: list[str]):
        """(watermarks, gone) once both deletions reach the metadata (they take a moment)."""
        gone: set[str] = set()
        marks = watermarks.read(reader, [(t, 0) for t in asked], "t", gone)
        return marks is not None and gone == {first, second} and (marks, gone)

    marks, _ = wait_for(lambda: read([first, second]), 30, "the deleted topics named gone")
    assert marks == {}
    marks, _ = wait_for(lambda: read([kept, first, second]), 30, "the deleted topics named gone")
    assert marks == {(kept, 0): (0, 0)}
