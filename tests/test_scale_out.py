"""Scaling out on partitions, on Apache Kafka's consumer groups (the classic protocol): 4-partition
table topics, two replica and two search instances in one consumer group each under the demo
load; one of each killed (kill -9) mid-way and not restarted: the survivor takes its partitions
once its session expires (``session.timeout.ms``, 10 s), then a new instance joins and takes its
share; a truncate mid-way; every view ends equal to the source. Then the same for the
translator: every business event once.

Each test gives its views a consumer group of their own (the search view's is its index's), as
each test has a database of its own.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from bottler.migrate.verify import verify
from bottler.status.groups import GroupReader
from capture.setup import topics
from common.kafka import await_topics
from compose.demo import seed
from compose.load import run_load
from materializers.search.client import SearchClient
from materializers.search.documents import TABLE_FIELD
from tests.support.databases import execute, fresh_database, rows
from tests.support.topics import Decoder, read_topic
from tests.support.waiting import wait_for, wait_streaming

TRANSACTION_TIMEOUT = 15  # seconds (the translator's --transaction-timeout)
# per shop table: key columns, one more column compared in the search index
SHOP = {"customers": (("id",), "email"), "products": (("id",), "sku"),
        "orders": (("id",), "status"), "order_items": (("order_id", "line_no"), "quantity")}


def test_a_new_table_topic_takes_the_partitions_asked_for_and_an_existing_one_keeps_its_own(
        stack, prefix, caplog):
    admin = AdminClient({"bootstrap.servers": stack.kafka})
    admin.create_topics([NewTopic(f"{prefix}.old", num_partitions=2)])[f"{prefix}.old"].result()
    await_topics(admin, [f"{prefix}.old"])
    with caplog.at_level(logging.WARNING, logger="capture.setup.topics"):
        topics.ensure_topics(admin, [f"{prefix}.old", f"{prefix}.new"], partitions=4)
    counts = {t: len(m.partitions) for t, m in admin.list_topics(timeout=10).topics.items()
              if t.startswith(prefix)}
    assert counts == {f"{prefix}.old": 2, f"{prefix}.new": 4}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and f"{prefix}.old has 2 partitions" in warnings[0]
    assert "asks for 4" in warnings[0]


def _view(args: list[str], log: Path) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "-m", "bottler", "materialize", *args,
                             "--join-group", "--instance-id", log.stem],
                            stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())


def _holdings(log: Path) -> list[str]:
    """The partitions an instance held, from its log: one entry per assignment."""
    return [line.split("holds", 1)[1] for line in log.read_text().splitlines()
            if " holds " in line]


def _search_state(client: SearchClient, index: str) -> dict[str, dict]:
    client.refresh(index)
    state: dict[str, dict] = {}
    for table, (key, column) in SHOP.items():
        answer = client.request("POST", f"/{index}/_search", {
            "query": {"term": {TABLE_FIELD: f"public.{table}"}}, "size": 10_000})
        state[table] = {tuple(h["_source"][k] for k in key): h["_source"][column]
                        for h in answer["hits"]["hits"]}
    return state


def _source_state(dsn: str) -> dict[str, dict]:
    return {table: {tuple(r[:-1]): r[-1] for r in rows(
        dsn, f"select {', '.join(key)}, {column} from {table}")}
        for table, (key, column) in SHOP.items()}


def test_an_instance_given_no_partition_ends_its_once_run(stack, source, prefix, start,
                                                          tmp_path):
    """More instances than partitions: with --once, the one holding nothing has nothing to
    catch up and exits, instead of waiting for a partition that may never come its way."""
    execute(source, "create table one (id int primary key)", "insert into one values (1)")
    start()  # one partition
    wait_streaming(source, prefix)
    common = ["-b", stack.kafka, "-r", stack.registry_url, "-p", prefix,
              "--group-id", f"{prefix}-replica"]
    with fresh_database(stack.pg_dsn) as target:
        first = _view(["postgres", "--target", target, *common], tmp_path / "a.log")
        try:
            wait_for(lambda: f"{prefix}.one[0]" in (tmp_path / "a.log").read_text(), 90,
                     "the first instance to hold the partition")
            second = _view(["postgres", "--target", target, *common, "--once"],
                           tmp_path / "b.log")
            assert second.wait(120) == 0, (tmp_path / "b.log").read_text()[-2000:]
            assert _holdings(tmp_path / "b.log")[-1].strip() == "no partition"
        finally:
            first.send_signal(signal.SIGTERM)
            first.wait(30)


def _partitions(holding: str, topic: str) -> list[int]:
    """The partitions of ``topic`` in a ``holds`` line's list."""
    return sorted(int(p.split("[")[1].split("]")[0]) for p in holding.split(", ")
                  if p.strip().startswith(f"{topic}["))


def _took_over(log: Path, topic: str) -> bool:
    """Whether the instance's last assignment holds every partition of ``topic``."""
    held = _holdings(log)
    return bool(held) and _partitions(held[-1], topic) == [0, 1, 2, 3]


def test_two_instances_of_each_view_share_the_partitions_and_survive_a_kill_and_a_truncate(
        stack, source, prefix, start, tmp_path):
    seed(source)
    start(partitions=4)
    wait_streaming(source, prefix)
    common = ["-b", stack.kafka, "-r", stack.registry_url, "-p", prefix]
    index = f"shop-{prefix}"
    orders = f"{prefix}.orders"
    client = SearchClient(stack.search_url)
    with fresh_database(stack.pg_dsn) as target:
        logs = {name: tmp_path / f"{name}.log" for name in ("r1", "r2", "r3", "s1", "s2", "s3")}

        def args(name: str) -> list[str]:
            return (["postgres", "--target", target, *common, "--group-id", f"{prefix}-r"]
                    if name[0] == "r" else
                    ["search", "--index", index, "--search", stack.search_url, *common])

        def holding(name: str) -> None:
            wait_for(lambda: f"holds {prefix}." in logs[name].read_text(), 90,
                     f"{name} to hold a partition")

        # both instances of each view join at once
        views = {name: _view(args(name), logs[name]) for name in ("r1", "r2", "s1", "s2")}
        stop = threading.Event()
        load = threading.Thread(target=run_load, args=(source, 30.0, stop), daemon=True)
        try:
            for name in ("r1", "r2", "s1", "s2"):
                holding(name)
            load.start()
            wait_for(lambda: rows(target, "select count(*) from bottler.offsets")[0][0] > 0,
                     60, "the replica to apply a batch")
            time.sleep(3)  # under load, batches in flight
            for name in ("r2", "s2"):  # killed for good: nobody restarts them
                views[name].send_signal(signal.SIGKILL)
                views[name].wait(10)
            killed = time.monotonic()
            execute(source, "truncate order_items")
            for name in ("r1", "s1"):  # their session expires: the survivors take everything
                wait_for(lambda n=name: _took_over(logs[n], orders), 60,
                         f"{name} to take over the killed instance's partitions")
            took = time.monotonic() - killed
            assert took < 30, f"the survivors took {took:.0f} s to take over"
            for name in ("r3", "s3"):  # a new instance joins and takes its share
                views[name] = _view(args(name), logs[name])
            for name in ("r3", "s3"):
                holding(name)
            time.sleep(5)
            stop.set()
            load.join(30)

            differences = []

            def equal_replica():
                report = verify(source, target)
                differences[:] = [(t.qualified, dict(t.difference_counts), t.problems)
                                  for t in report.tables if not t.identical]
                return not differences and len(report.tables) == 4

            try:
                wait_for(equal_replica, 180, "the replica to equal the source")
            except AssertionError:
                raise AssertionError(f"the replica differs: {differences}") from None
            expected = _source_state(source)

            def instances():  # as `bottler status` shows them
                held = {i.name: i.partitions.get(orders, [])
                        for i in GroupReader(stack.kafka).read() if i.group == f"{prefix}-r"}
                return held if set(held) == {"r1", "r3"} else None

            held = wait_for(instances, 30, "the live replica instances listed with their "
                                           "partitions, the killed one gone")
            assert sorted(held["r1"] + held["r3"]) == [0, 1, 2, 3]
            assert held["r1"] and held["r3"]
            try:
                wait_for(lambda: _search_state(client, index) == expected, 180,
                         "the search index to equal the source")
            except AssertionError:
                got = _search_state(client, index)
                raise AssertionError("the search index differs: " + "; ".join(
                    f"{t}: {len(expected[t].keys() - got[t].keys())} missing, "
                    f"{len(got[t].keys() - expected[t].keys())} extra, "
                    f"{sum(got[t].get(k) != v for k, v in expected[t].items())} different"
                    for t in SHOP)) from None
        finally:
            stop.set()
            for proc in views.values():
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(30)
        assert not load.is_alive()
        # the new instances took their share from the survivors
        for survivor, newcomer in (("r1", "r3"), ("s1", "s3")):
            mine, theirs = (_partitions(_holdings(logs[n])[-1], orders)
                            for n in (survivor, newcomer))
            assert mine and theirs and sorted(mine + theirs) == [0, 1, 2, 3]
        # and the orders topic's rows are spread over its 4 partitions, a key in one only
        decoder = Decoder(stack.registry_url)
        where: dict[int, set[int]] = {}
        for msg in read_topic(stack.kafka, orders):
            where.setdefault(decoder.key(msg)["id"], set()).add(msg.partition())
        assert all(len(parts) == 1 for parts in where.values())
        assert {p for parts in where.values() for p in parts} == {0, 1, 2, 3}
        assert rows(source, "select count(*) from order_items")[0][0] > 0  # written after it


def _translator(stack, prefix: str, group: str, log: Path) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "translate", "tests.support.translate:slow",
         "--broker", stack.kafka, "--schema-registry", stack.registry_url,
         "--topic-prefix", prefix, "--group-id", group, "--batch-size", "50",
         "--join-group", "--instance-id", log.stem,
         # the killed one's open transaction holds the survivor back this long (default 60 s)
         "--transaction-timeout", str(TRANSACTION_TIMEOUT)],
        stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())


def test_two_translator_instances_share_the_partitions_and_one_killed_loses_and_doubles_nothing(
        stack, source, prefix, start, tmp_path):
    """Two instances of the orders translator on a 4-partition orders topic under a write load;
    one killed (kill -9) mid-way, for good: the survivor takes its partitions once its session
    expires, and goes on from the offsets its last committed transaction stored (its open
    transaction aborted by the broker after ``transaction.timeout.ms``); a third instance joins
    and takes its share. A read_committed reader of the events sees what one instance gives,
    every order's story once, in order."""
    from tests.support.translate import ORDERS, Events, expected_lifecycles, write_load

    execute(source, ORDERS)
    start(partitions=4)
    wait_streaming(source, prefix)
    events = Events(stack, f"{prefix}.order-events")
    group = f"g-{prefix}"
    orders = f"{prefix}.orders"
    logs = {name: tmp_path / f"{name}.log" for name in ("t1", "t2", "t3")}
    procs = {name: _translator(stack, prefix, group, logs[name]) for name in ("t1", "t2")}
    stop = threading.Event()
    load = threading.Thread(target=write_load, args=(source, stop), daemon=True)
    load.start()
    try:
        for name in ("t1", "t2"):
            wait_for(lambda n=name: f"holds {orders}" in logs[n].read_text(), 90,
                     f"{name} to hold partitions")
        shared = {n: _partitions(_holdings(logs[n])[-1], orders) for n in ("t1", "t2")}
        seen = len(events.messages())
        wait_for(lambda: len(events.messages()) > seen + 20, 60, "events committed")
        procs["t2"].send_signal(signal.SIGKILL)  # mid-transaction, most likely (slow batches)
        procs["t2"].wait(10)
        # t2's session expires (10 s), then its open transaction is aborted (TRANSACTION_TIMEOUT,
        # and up to the broker's check of timed-out ones, every second in tests: TEST_BROKER)
        # before t1 restores the state of t2's partitions
        wait_for(lambda: _took_over(logs["t1"], orders), 150,
                 "t1 to take over t2's partitions")
        procs["t3"] = _translator(stack, prefix, group, logs["t3"])
        wait_for(lambda: f"holds {orders}" in logs["t3"].read_text(), 90, "t3 to hold partitions")
        time.sleep(3)
        stop.set()
        load.join(30)
        expected = expected_lifecycles(source)
        total = sum(len(kinds) for kinds in expected.values())
        # t2's open transaction holds back read_committed readers until the broker aborts it
        wait_for(lambda: len(events.messages()) >= total, 180, f"{total} events")
        time.sleep(1.0)  # time for a duplicate to show, were there one
        live = ("t1", "t3")
        assert all(procs[n].poll() is None for n in live), logs["t3"].read_text()[-2000:]
    finally:
        stop.set()
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
    got = events.by_order()
    assert len(expected) > 50
    assert got == expected  # every event, once, in its order per order
    assert len(events.messages()) == total
    # the instances shared the partitions, then the survivor and the newcomer did
    assert shared["t1"] and shared["t2"] and sorted(shared["t1"] + shared["t2"]) == [0, 1, 2, 3]
    last = [_partitions(_holdings(logs[n])[-1], orders) for n in live]
    assert last[0] and last[1] and sorted(last[0] + last[1]) == [0, 1, 2, 3]
    assert logs["t3"].read_text().count("restored") >= 1  # its keys' state, at its start
