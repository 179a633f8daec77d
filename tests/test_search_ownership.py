"""The search view writes into, and deletes, only the physical indices it created (issue 25,
harm 3), through the real command line: an alias pointing at a user's index, and a user's own
index named like a version (``NAME-1``), are refused with one line and left intact; an index of
an older bottler (no mark, but its offsets document) is still recognised."""

from __future__ import annotations

import uuid

import pytest
from elasticsearch import Elasticsearch

from materializers.search import indices
from materializers.search.client import SearchClient
from tests.support import execute, wait_streaming
from tests.test_capture_errors import assert_clear_error, bottler

SOURCE = """
create table items (id int primary key, name text);
insert into items select g, 'item ' || g from generate_series(1, 20) g;
"""


@pytest.fixture
def name():
    return f"own-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def es(stack, name):
    es = Elasticsearch(stack.search_url)
    yield es
    for index in es.indices.get(index=f"{name}*", ignore_unavailable=True):
        es.indices.delete(index=index)


def search(stack, prefix, *args: str):
    return bottler(*args, "--search", stack.search_url, "--broker", stack.kafka,
                   "--schema-registry", stack.registry_url, "--topic-prefix", prefix,
                   timeout=120)


def users_index(es: Elasticsearch, index: str) -> None:
    es.indices.create(index=index, mappings={"properties": {"title": {"type": "text"}}})
    es.index(index=index, id="u1", document={"title": "mine"}, refresh=True)


def assert_intact(es: Elasticsearch, index: str) -> None:
    es.indices.refresh(index=index)
    hits = es.search(index=index, query={"match_all": {}})["hits"]["hits"]
    assert [(h["_id"], h["_source"]) for h in hits] == [("u1", {"title": "mine"})]


@pytest.fixture
def captured(stack, source, prefix, start):
    execute(source, SOURCE)
    start()
    wait_streaming(source, prefix)
    return source


def test_an_alias_at_a_users_index_is_neither_written_nor_deleted(stack, captured, prefix,
                                                                   name, es):
    users_index(es, f"{name}-user")
    es.indices.put_alias(index=f"{name}-user", name=name)

    written = search(stack, prefix, "materialize", "search", "--index", name, "--once")
    assert_clear_error(written, f"{name}-user", "not created by bottler", "--index")
    reindexed = search(stack, prefix, "reindex", name, "--max-lag", "0",
                       "--handover-timeout", "1")
    assert_clear_error(reindexed, f"{name}-user", "not created by bottler", "--index")

    assert_intact(es, f"{name}-user")
    assert list(es.indices.get_alias(name=name)) == [f"{name}-user"]
    assert not es.indices.exists(index=f"{name}-1")


def test_a_users_index_named_like_a_version_is_left_alone(stack, captured, prefix, name, es):
    users_index(es, f"{name}-1")

    written = search(stack, prefix, "materialize", "search", "--index", name, "--once")
    assert_clear_error(written, f"{name}-1", "not created by bottler", "--index")
    assert_intact(es, f"{name}-1")
    assert not es.indices.exists_alias(name=name)

    # a rebuild takes the next free version, its own; the user's index stays through two
    for _ in range(2):
        reindexed = search(stack, prefix, "reindex", name, "--max-lag", "0",
                           "--handover-timeout", "1")
        assert reindexed.returncode == 0, reindexed.stderr
    assert sorted(es.indices.get(index=f"{name}-*")) == [f"{name}-1", f"{name}-3"]
    assert list(es.indices.get_alias(name=name)) == [f"{name}-3"]
    assert es.count(index=name)["count"] == 20
    assert_intact(es, f"{name}-1")


def test_an_index_of_an_older_bottler_is_recognised_by_its_offsets(stack, captured, prefix,
                                                                    name, es):
    # as bottler created indices before its mark: no _meta, an offsets document of its uuid
    es.indices.create(index=f"{name}-1")
    es.indices.put_alias(index=f"{name}-1", name=name)
    client = SearchClient(stack.search_url)
    indices.OffsetStore(client).save(f"{name}-1", client.index_uuid(f"{name}-1"), name, {})

    written = search(stack, prefix, "materialize", "search", "--index", name, "--once")
    assert written.returncode == 0, written.stderr
    reindexed = search(stack, prefix, "reindex", name, "--max-lag", "0",
                       "--handover-timeout", "1")
    assert reindexed.returncode == 0, reindexed.stderr
    assert f"{name}-1 deleted" in reindexed.stdout
    assert sorted(es.indices.get(index=f"{name}-*")) == [f"{name}-2"]
