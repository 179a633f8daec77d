"""Do no harm (issue 13): the capture never makes an application's statement fail on the source,
during the capture or after it, and a start that fails leaves no publication, slot or topic."""

from __future__ import annotations

import httpx
import psycopg
import psycopg2
import psycopg2.extras
import pytest
from confluent_kafka.admin import AdminClient

from capture.setup.state import CaptureState
from common.errors import BottlerError
from compose.procs import free_port
from tests.support.databases import execute, rows
from tests.support.topics import read_topic, topic_state
from tests.support.waiting import wait_for, wait_streaming

TABLES = """
create table keyed (id int primary key, v int);
create table unkeyed (a int, b text);
create table full_identity (a int, b text);
alter table full_identity replica identity full;
create table nothing_identity (id int primary key, v int);
alter table nothing_identity replica identity nothing;
"""
ALL = ("keyed", "unkeyed", "full_identity", "nothing_identity")


def fill(dsn: str, tables=ALL) -> None:
    for t in tables:
        execute(dsn, f"insert into {t} select g, g from generate_series(1, 5) g")


def update_and_delete_everything(dsn: str, tables=ALL) -> None:
    """What an application does: every statement must succeed."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for t in tables:
            column = "id" if t in ("keyed", "nothing_identity") else "a"
            conn.execute(f"update {t} set {column} = {column} + 100 where {column} = 1")
            conn.execute(f"delete from {t} where {column} = 2")
            conn.execute(f"update {t} set {column} = {column} where true")


def publications(dsn: str) -> dict[str, tuple[bool, bool, list[str]]]:
    """Each publication: (publishes updates, publishes deletes, its tables)."""
    return {
        name: (upd, dele, sorted(t for t in tables if t))
        for name, upd, dele, tables in rows(dsn, """
            select p.pubname, p.pubupdate, p.pubdelete, array_agg(c.relname::text)
            from pg_publication p
            left join pg_publication_rel r on r.prpubid = p.oid
            left join pg_class c on c.oid = r.prrelid
            group by 1, 2, 3""")
    }


def leftovers(stack, source, prefix) -> dict:
    topics = [t for t in AdminClient({"bootstrap.servers": stack.kafka})
              .list_topics(timeout=10).topics if t.startswith(prefix)]
    slots = rows(source, f"select slot_name from pg_replication_slots "
                 f"where slot_name like '{prefix}%'")
    # soft-deleted ones included: a subject deleted only softly still holds its versions
    subjects = [s for s in httpx.get(f"{stack.registry_url}/subjects?deleted=true").json()
                if s.startswith(prefix)]
    return {k: v for k, v in (("publications", list(publications(source))), ("slots", slots),
                              ("topics", topics), ("subjects", sorted(subjects))) if v}


@pytest.mark.parametrize(
    "allow_unkeyed, tables",
    [(False, []), (True, []), (False, ["keyed"]),
     (True, ["keyed", "unkeyed", "full_identity"])],
    ids=["all-refused", "all-allow-unkeyed", "tables", "tables-allow-unkeyed"],
)
def test_applications_writes_never_fail_during_or_after_the_capture(
    stack, source, prefix, start, allow_unkeyed, tables
):
    execute(source, TABLES)
    fill(source)
    capture = start(allow_unkeyed=allow_unkeyed, tables=tables)
    if not allow_unkeyed and not tables:  # unkeyed tables, not allowed: refused with the fix
        error = capture.wait_failed()
        assert isinstance(error, BottlerError)
        assert "public.unkeyed" in str(error) and "--allow-unkeyed" in str(error)
        update_and_delete_everything(source)
        assert leftovers(stack, source, prefix) == {}
        return
    wait_streaming(source, prefix)
    pubs = publications(source)
    captured = tables or ALL
    keyed_published = [t for t in ("keyed", "full_identity") if t in captured]
    assert pubs[prefix][:2] == (True, True)
    assert pubs[prefix][2] == sorted(keyed_published)
    if allow_unkeyed:  # no replica identity: inserts only, which PostgreSQL always accepts
        assert pubs[f"{prefix}_unkeyed"] == (
            False, False, sorted({"unkeyed", "nothing_identity"} & set(captured)))
    else:
        assert set(pubs) == {prefix}
    update_and_delete_everything(source)
    execute(source, "insert into keyed values (1000, 1)")
    topic_state(stack, f"{prefix}.keyed", 1 + 5 - 1)  # 5 rows, one deleted, one inserted

    if not tables:  # tables created later join only if PostgreSQL can publish what they get
        execute(source, "create table later_unkeyed (a int)",
                "create table later_keyed (id int primary key)",
                "insert into later_unkeyed values (1), (2)",
                "insert into later_keyed values (1), (2)")
        topic_state(stack, f"{prefix}.later_keyed", 2)  # copied when it joined
        execute(source, "insert into later_keyed values (3)")
        topic_state(stack, f"{prefix}.later_keyed", 3)  # then streamed
        execute(source, "update later_unkeyed set a = 3 where a = 1",
                "delete from later_unkeyed where a = 2")
        if allow_unkeyed:
            wait_for(lambda: len(read_topic(stack.kafka, f"{prefix}.later_unkeyed")) >= 2, 30,
                     "the later unkeyed table's rows")
    capture.stop()
    update_and_delete_everything(source)  # after the capture: the publications stay, harmless
    execute(source, "update later_unkeyed set a = 4" if not tables else "select 1")


@pytest.fixture
def exhausted_slots(stack):
    """Every replication slot of the server in use (by physical slots that reserve nothing)."""
    used, limit = rows(stack.pg_dsn, "select count(*), current_setting('max_replication_slots')"
                       "::int from pg_replication_slots")[0]
    names = [f"filler_{i}" for i in range(limit - used)]
    execute(stack.pg_dsn, *(f"select pg_create_physical_replication_slot('{n}')" for n in names))
    yield
    execute(stack.pg_dsn, *(f"select pg_drop_replication_slot('{n}')" for n in names))


@pytest.fixture
def exhausted_wal_senders(stack):
    """Every WAL sender of the server in use: the replication connection is refused, after the
    checks, when the slot is created."""
    busy, limit = rows(stack.pg_dsn, "select (select count(*) from pg_stat_activity where "
                       "backend_type = 'walsender'), current_setting('max_wal_senders')::int")[0]
    held = [psycopg2.connect(stack.pg_dsn,
                             connection_factory=psycopg2.extras.LogicalReplicationConnection)
            for _ in range(limit - busy)]
    yield
    for conn in held:
        conn.close()


@pytest.mark.parametrize("case", ["missing-table", "no-key", "slots-exhausted", "registry-down",
                                  "broker-down", "wal-senders-exhausted"])
def test_a_failed_start_leaves_nothing_behind(stack, source, prefix, start, request, case):
    execute(source, "create table items (id int primary key)", "insert into items values (1)")
    overrides, expected = {}, ""
    if case == "missing-table":
        overrides, expected = {"tables": ["items", "nosuch"]}, "public.nosuch"
    elif case == "no-key":
        execute(source, "create table log (line text)")
        expected = "--allow-unkeyed"
    elif case == "slots-exhausted":
        request.getfixturevalue("exhausted_slots")
        expected = "all replication slots are in use"
    elif case == "registry-down":
        overrides, expected = {"schema_registry": f"http://127.0.0.1:{free_port()}"}, "registry"
    elif case == "broker-down":
        overrides, expected = {"broker": f"127.0.0.1:{free_port()}"}, "unreachable"
    else:
        request.getfixturevalue("exhausted_wal_senders")
        expected = "max_wal_senders"
    error = start(**overrides).wait_failed()
    assert isinstance(error, BottlerError) and expected in str(error), error
    assert leftovers(stack, source, prefix) == {}


def test_a_failed_start_keeps_what_existed_before(stack, source, prefix, start, request):
    """A start that fails removes only what it created: a publication and topics of an earlier
    run stay."""
    execute(source, "create table items (id int primary key)", "insert into items values (1)")
    capture = start()
    topic_state(stack, f"{prefix}.items", 1)
    capture.stop()
    execute(source, f"select pg_drop_replication_slot('{prefix}')")
    before = leftovers(stack, source, prefix)
    assert before["subjects"]  # the earlier run's: kept
    records = CaptureState(stack.kafka, prefix).read_all()
    request.getfixturevalue("exhausted_wal_senders")
    # the slot the records know is gone: only --recover-lost-slot makes a new one
    # (test_capture_slot_safety), which fails here
    error = start(recover_lost_slot=True).wait_failed()
    assert "max_wal_senders" in str(error)
    assert leftovers(stack, source, prefix) == before
    # the slot's progress record, rewritten by the start, has its earlier value back
    assert CaptureState(stack.kafka, prefix).read_all() == records


def test_a_new_topic_prefix_on_an_existing_slot_is_refused(stack, source, prefix, start):
    """The slot streams for prefix P: a start with prefix Q on it would give Q's topics only
    the rows changed from then on (issue 25). Refused in one line naming P; Q leaves nothing
    behind, P's topics and the slot are intact."""
    execute(source, "create table items (id int primary key)",
            "insert into items select generate_series(1, 100)")
    capture = start()
    topic_state(stack, f"{prefix}.items", 100)
    capture.stop()
    before = publications(source)
    other = f"{prefix}q"
    error = start(topic_prefix=other).wait_failed()
    assert isinstance(error, BottlerError), error
    assert f"made for --topic-prefix '{prefix}', not '{other}'" in error.message, error
    assert "--slot" in error.hint, error
    assert leftovers(stack, source, other) == {"publications": list(before)}
    assert publications(source) == before
    assert rows(source, "select slot_name from pg_replication_slots") == [(prefix,)]
    execute(source, "insert into items values (101)")
    capture = start()  # the slot's own prefix: it resumes
    topic_state(stack, f"{prefix}.items", 101)
    capture.stop()


def test_an_earlier_for_all_tables_publication_is_refused_with_the_fix(stack, source, prefix,
                                                                      start):
    execute(source, "create table items (id int primary key)",
            f"create publication {prefix} for all tables")
    error = start().wait_failed()
    assert "FOR ALL TABLES" in str(error) and f'DROP PUBLICATION "{prefix}"' in str(error)
    assert rows(source, "select count(*) from pg_replication_slots") == [(0,)]
