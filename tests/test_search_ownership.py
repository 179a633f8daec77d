"""The search view writes into, and deletes, only the physical indices it created (issue 25,
harm 3), through the real command line: an alias pointing at a user's index, and a user's own
index named like a version (``NAME-1``), are refused with one line and left intact; an index of
an older bottler (no mark, but its offsets document) is still recognised."""

from __future__ import annotations

import uuid

import pytest

from materializers.search import indices
from materializers.search.client import SearchClient
from tests.support import search_api as api
from tests.support.cli import assert_clear_error, bottler
from tests.support.databases import execute
from tests.support.waiting import wait_streaming

SOURCE = """
create table items (id int primary key, name text);
insert into items select g, 'item ' || g from generate_series(1, 20) g;
"""


@pytest.fixture
def name():
    return f"own-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def es(stack, name):
    es = SearchClient(stack.search_url)
    yield es
    for index in api.named(es, f"{name}*"):
        es.request("DELETE", f"/{index}")


def search(stack, prefix, *args: str):
    return bottler(*args, "--search", stack.search_url, "--broker", stack.kafka,
                   "--schema-registry", stack.registry_url, "--topic-prefix", prefix,
                   timeout=120)


def users_index(es: SearchClient, index: str) -> None:
    api.create(es, index, {"mappings": {"properties": {"title": {"type": "text"}}}})
    api.put(es, index, "u1", {"title": "mine"})


def assert_intact(es: SearchClient, index: str) -> None:
    hits = api.hits(es, index)
    assert [(h["_id"], h["_source"]) for h in hits] == [("u1", {"title": "mine"})]


@pytest.fixture
def streaming(stack, source, prefix, start):
    execute(source, SOURCE)
    start()
    wait_streaming(source, prefix)
    return source


def test_an_alias_at_a_users_index_is_neither_written_nor_deleted(stack, streaming, prefix,
                                                                   name, es):
    users_index(es, f"{name}-user")
    api.put_alias(es, f"{name}-user", name)

    written = search(stack, prefix, "materialize", "search", "--index", name, "--once")
    assert_clear_error(written, f"{name}-user", "not created by bottler", "--index")
    reindexed = search(stack, prefix, "reindex", name, "--max-lag", "0",
                       "--handover-timeout", "1")
    assert_clear_error(reindexed, f"{name}-user", "not created by bottler", "--index")

    assert_intact(es, f"{name}-user")
    assert api.aliased(es, name) == [f"{name}-user"]
    assert not es.exists(f"{name}-1")


def test_a_users_index_named_like_a_version_is_left_alone(stack, streaming, prefix, name, es):
    users_index(es, f"{name}-1")

    written = search(stack, prefix, "materialize", "search", "--index", name, "--once")
    assert_clear_error(written, f"{name}-1", "not created by bottler", "--index")
    assert_intact(es, f"{name}-1")
    assert api.aliased(es, name) == []

    # a rebuild takes the next free version, its own; the user's index stays through two
    for _ in range(2):
        reindexed = search(stack, prefix, "reindex", name, "--max-lag", "0",
                           "--handover-timeout", "1")
        assert reindexed.returncode == 0, reindexed.stderr
    assert api.named(es, f"{name}-*") == [f"{name}-1", f"{name}-3"]
    assert api.aliased(es, name) == [f"{name}-3"]
    assert api.count(es, name) == 20
    assert_intact(es, f"{name}-1")


def test_an_index_of_an_older_bottler_is_recognised_by_its_offsets(stack, streaming, prefix,
                                                                    name, es):
    # as bottler created indices before its mark: no _meta, an offsets document of its uuid
    api.create(es, f"{name}-1")
    api.put_alias(es, f"{name}-1", name)
    indices.OffsetStore(es).save(f"{name}-1", es.index_uuid(f"{name}-1"), name, {})

    written = search(stack, prefix, "materialize", "search", "--index", name, "--once")
    assert written.returncode == 0, written.stderr
    reindexed = search(stack, prefix, "reindex", name, "--max-lag", "0",
                       "--handover-timeout", "1")
    assert reindexed.returncode == 0, reindexed.stderr
    assert f"{name}-1 deleted" in reindexed.stdout
    assert api.named(es, f"{name}-*") == [f"{name}-2"]
