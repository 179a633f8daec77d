"""Exactly once across crashes: `bottler translate` as a child process, killed with SIGKILL in
the middle of its transactions while orders keep changing, restarted each time; a
read_committed consumer then sees every expected business event once, none twice."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace

import psycopg

from materializers.translators.examples import orders
from tests.support.databases import execute, rows
from tests.support.topics import read_committed
from tests.support.waiting import wait_for, wait_streaming
from tests.test_translate import ORDERS, Events

SLOW_CHANGE = 0.004  # seconds per change: a batch of 50 is a transaction open for ~0.2 s


def slow_translate(change):
    time.sleep(SLOW_CHANGE)
    return orders.translate(change)


slow = replace(orders.translator, translate=slow_translate)  # what the child process runs


def expected_lifecycles(dsn: str) -> dict[int, list[str]]:
    """The events each order's final status implies: the load only moves orders along
    placed → paid → shipped, or from placed to cancelled."""
    implied = {"placed": [], "paid": ["OrderPaid"], "shipped": ["OrderPaid", "OrderShipped"],
               "cancelled": ["OrderCancelled"]}
    return {order_id: ["OrderPlaced", *implied[status]]
            for order_id, status in rows(dsn, "select id, status from orders")}


def write_load(dsn: str, stop: threading.Event, seed: int = 7) -> int:
    """Orders placed and moved along their lifecycle, with noise (note updates), one
    statement per transaction, until ``stop``; returns the number of orders."""
    rng = random.Random(seed)
    live: dict[int, str] = {}
    next_id = 1
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            if len(live) < 20 or rng.random() < 0.3:
                conn.execute("insert into orders (id, customer_id, total) values (%s, %s, %s)",
                             (next_id, next_id % 97, rng.randint(100, 99999) / 100))
                live[next_id] = "placed"
                next_id += 1
            else:
                order_id = rng.choice(list(live))
                status = live[order_id]
                move = rng.random()
                if move < 0.35:
                    conn.execute("update orders set note = %s where id = %s",
                                 (f"note {rng.random():.6f}", order_id))
                elif status == "placed" and move < 0.5:
                    conn.execute("update orders set status = 'cancelled' where id = %s",
                                 (order_id,))
                    del live[order_id]
                elif status == "placed":
                    conn.execute("update orders set status = 'paid', paid_at = now() "
                                 "where id = %s", (order_id,))
                    live[order_id] = "paid"
                else:
                    conn.execute("update orders set status = 'shipped', shipped_at = now() "
                                 "where id = %s", (order_id,))
                    del live[order_id]
            time.sleep(0.002)
    return next_id - 1


def translator_process(stack, prefix: str, group: str, log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "translate", "tests.test_translate_crash:slow",
         "--broker", stack.kafka, "--schema-registry", stack.registry_url,
         "--topic-prefix", prefix, "--group-id", group, "--batch-size", "50"],
        stdout=log, stderr=subprocess.STDOUT, cwd=os.getcwd(),
    )


def test_kill_9_mid_batch_neither_duplicates_nor_loses_a_business_event(
        stack, source, prefix, start, tmp_path):
    execute(source, ORDERS)
    start()
    wait_streaming(source, prefix)
    topic = f"{prefix}.order-events"
    events = Events(stack, topic)
    group = f"g-{uuid.uuid4().hex[:8]}"
    stop_load = threading.Event()
    load = threading.Thread(target=write_load, args=(source, stop_load), daemon=True)
    load.start()
    rng = random.Random(11)
    kills = 0
    with open(tmp_path / "translate.log", "ab") as log:
        process = translator_process(stack, prefix, group, log)
        try:
            for _ in range(3):
                seen = len(events.messages())
                wait_for(lambda p=process, s=seen: p.poll() is None and len(events.messages()) > s,
                         60, "the translator to commit events")
                time.sleep(rng.uniform(0.2, 0.7))
                process.send_signal(signal.SIGKILL)
                process.wait(10)
                kills += 1
                process = translator_process(stack, prefix, group, log)
            time.sleep(1.0)
            stop_load.set()
            load.join(30)
            expected = expected_lifecycles(source)
            total = sum(len(kinds) for kinds in expected.values())
            wait_for(lambda: process.poll() is None and len(events.messages()) >= total, 120,
                     f"{total} events")
            time.sleep(1.0)  # time for a duplicate to show, were there one
            assert process.poll() is None, (tmp_path / "translate.log").read_text()[-2000:]
        finally:
            process.terminate()
            process.wait(30)
    assert kills == 3
    got = events.by_order()
    assert len(expected) > 100
    wrong = {order: (got.get(order), kinds) for order, kinds in expected.items()
             if got.get(order) != kinds}
    wrong.update({order: (kinds, None) for order, kinds in got.items() if order not in expected})
    # every event, once, in its order per order: (seen, expected) of each order that differs
    assert not wrong, (wrong, (tmp_path / "translate.log").read_text()[-3000:])
    assert len(events.messages()) == total
    # A kill did land inside a transaction: its events are in the log, aborted.
    uncommitted = read_committed(stack.kafka, topic, "read_uncommitted")
    assert len(uncommitted) > total
    print(f"{len(expected)} orders, {total} events, {len(uncommitted) - total} aborted")
    log_text = (tmp_path / "translate.log").read_text()
    assert log_text.count("restored") == 4  # each start restored the keyed state
