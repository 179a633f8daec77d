"""The core's behaviour (materializers/core: positions, poison, watermarks), asserted against every
loop that ships: the consumer loop, the warehouse job and the translator runner, each fed by
hand-made messages on the real broker and registry (tests/core_loops.py drives them alike).
Where a behaviour does not apply to a loop, its parameter is skipped with the reason."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from materializers.core import MemorySink, PoisonMessage, RejectedChange
from tests.support.kafka_node import own_kafka
from tests.support.loops import LOOPS, Topic
from tests.support.topics import read_committed
from tests.support.waiting import wait_for

NO_TRUNCATES = ("a translator sees row changes only: it does not read the truncate topic, so it "
                "has no barriers to follow")
NO_SINK = ("a translator has no sink to refuse at flush: its events are produced in the batch's "
           "transaction, and a translate function that raises is its refusal (test_poison)")


def every_loop(not_for: dict[str, str] | None = None):
    """Parametrize ``loop`` over every loop; ``not_for``: loop name -> why it does not apply."""
    not_for = not_for or {}
    return pytest.mark.parametrize("loop", [
        pytest.param(name, marks=pytest.mark.skip(reason=f"not for the {name}: {not_for[name]}"))
        if name in not_for else name
        for name in LOOPS], indirect=True)


@pytest.fixture
def loop(request, stack):
    return LOOPS[request.param](stack, request)


@every_loop(not_for={"translator runner": NO_TRUNCATES})
def test_truncate_barrier_whichever_is_read_first(stack, loop):
    topic = Topic(stack, partitions=2)
    for i in range(6):
        topic.put(i, "before", partition=i % 2)
    early = loop.view()  # reads the post-barrier rows before the truncate event exists
    topic.put(10, "after", partition=0)  # not covered by the barrier below
    loop.catch_up(topic, early)
    assert set(loop.rows(early)) == {0, 1, 2, 3, 4, 5, 10}
    topic.truncate(offsets={0: 3, 1: 3})  # rows 0..5 void, row 10 (offset 3) kept
    topic.put(11, "after", partition=1)
    topic.put(2, "again", partition=0)

    fresh = loop.view()
    loop.catch_up(topic, fresh)
    expected = {10: "after", 11: "after", 2: "again"}
    assert loop.rows(fresh) == expected and fresh.truncates == 1
    loop.catch_up(topic, early)
    assert loop.rows(early) == expected  # rewound to the barrier: row 10 replayed after it
    assert loop.offset(early, (topic.name, 0)) == 5 and loop.offset(early, (topic.name, 1)) == 4


@every_loop()
def test_poison_messages_go_to_the_dead_letter_topic_or_stop(stack, loop):
    topic = Topic(stack)
    topic.put(1, "ok")
    topic.put(2, raw_value=b"\x00\x00\x00\xff\xffgarbage")  # an unknown schema id
    topic.put(3, "refused")
    topic.put(4, "ok")

    stopping = loop.view()
    with pytest.raises(PoisonMessage, match=r"\[0\]@1: schema id \d+ is not in the registry"):
        loop.catch_up(topic, stopping, on_poison="stop")
    assert loop.offset(stopping, (topic.name, 0)) is None  # nothing of it counts as done

    view = loop.view(refuse=lambda row: "value too long" if row["v"] == "refused" else None)
    loop.catch_up(topic, view)
    assert loop.rows(view) == {1: "ok", 4: "ok"}
    assert loop.offset(view, (topic.name, 0)) == 4
    dead = wait_for(lambda: len(m := read_committed(stack.kafka, topic.dead_letters)) == 2 and m,
                    30, "two dead letters")
    headers = [dict(m.headers()) for m in dead]
    assert [h["bottler.offset"] for h in headers] == [b"1", b"2"]
    assert b"not in the registry" in headers[0]["bottler.reason"]
    assert headers[0]["bottler.error"] == b"DecodeError"
    assert b"value too long" in headers[1]["bottler.reason"]
    assert headers[1]["bottler.error"] == loop.error.encode()
    assert dead[0].value() == b"\x00\x00\x00\xff\xffgarbage"  # the original bytes


@every_loop()
def test_a_partition_that_lost_its_end_is_replayed_not_skipped(stack, loop):
    """The broker lost the end of a partition's log (restarted from an older save) and new
    messages took the lost offsets: they are applied, not skipped as already seen."""
    topic = Topic(stack)
    for i in range(10):
        topic.put(i, "old")
    view = loop.view()
    loop.catch_up(topic, view)
    assert loop.offset(view, (topic.name, 0)) == 10
    topic.recreate()
    for i in range(3):
        topic.put(i, "new")  # offsets 0-2, which the view has seen holding "old"
    loop.catch_up(topic, view)
    assert loop.rows(view) == {0: "new", 1: "new", 2: "new"} | {i: "old" for i in range(3, 10)}
    assert loop.offset(view, (topic.name, 0)) == 3


@every_loop(not_for={"translator runner": NO_SINK})
def test_a_change_refused_at_flush_goes_to_the_dead_letter_topic_and_the_rest_lands(stack,
                                                                                    loop):
    """A search cluster refuses a document only in its bulk answer, at flush."""
    topic = Topic(stack)
    for i, v in enumerate(("ok", "refused at flush", "ok")):
        topic.put(i, v)

    class RefusingAtFlush(MemorySink):
        def flush(self):
            for change in self._staged:
                if change.value and change.value["v"] == "refused at flush":
                    self._staged = []  # nothing of the refused flush is durable
                    raise RejectedChange(change, "mapper_parsing_exception")
            super().flush()

    view = loop.view(sink=RefusingAtFlush())
    loop.catch_up(topic, view)
    assert loop.rows(view) == {0: "ok", 2: "ok"} and loop.offset(view, (topic.name, 0)) == 3
    dead = wait_for(lambda: read_committed(stack.kafka, topic.dead_letters), 30, "a dead letter")
    assert [dict(m.headers())["bottler.reason"] for m in dead] == [b"mapper_parsing_exception"]


@pytest.mark.parametrize("name", list(LOOPS))
def test_a_broker_restart_during_watermark_reads_is_a_pause(stack, request, name):
    """The loop reads watermarks all the time (every 50 ms) while the broker restarts: it goes
    on once the broker is back, and applies what was written after the restart. On a broker
    of the test's own: a restart of the session's would pause every test running beside."""
    with own_kafka() as broker:
        on_own = SimpleNamespace(kafka=broker.bootstrap, registry_url=stack.registry_url)
        loop = LOOPS[name](on_own, request)
        topic = Topic(on_own)
        for i in range(5):
            topic.put(i, "before")
        view = loop.view()
        with loop.running(topic, view) as failure:
            wait_for(lambda: failure or loop.count(view) == 5, 60, "the rows before the restart")
            assert not failure
            broker.stop()
            broker.start()
            for i in range(5, 10):
                topic.put(i, "after")
            assert topic.producer.flush(30) == 0
            wait_for(lambda: failure or loop.count(view) == 10, 90, "the rows after the restart")
            assert not failure, failure
        assert loop.rows(view) == {i: "before" if i < 5 else "after" for i in range(10)}


def test_a_warehouse_batch_begun_while_the_broker_is_away_waits_for_it(stack, request):
    """The warehouse job's batch lists the topics itself, on a connection idle since its last
    batch: the broker away then (stopped here; restarting, in a CI run that failed so) makes it
    a batch to do again, as when the watermarks cannot be read, not the job's end."""
    with own_kafka() as broker:  # to stop: the session's serves every other test
        on_own = SimpleNamespace(kafka=broker.bootstrap, registry_url=stack.registry_url)
        loop = LOOPS["warehouse job"](on_own, request)
        topic = Topic(on_own)
        topic.put(0)
        view = loop.view()
        job = loop.job(topic, view)
        try:
            broker.stop()
            try:
                assert job.batch().unknown
            finally:
                broker.start()
            wait_for(lambda: job.batch().changes or loop.count(view), 120, "the batch again")
            assert loop.rows(view) == {0: "x"}
        finally:
            job.close()
