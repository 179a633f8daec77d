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

from tests.support.databases import execute
from tests.support.topics import read_committed
from tests.support.translate import ORDERS, Events, expected_lifecycles, write_load
from tests.support.waiting import wait_for, wait_streaming


def translator_process(stack, prefix: str, group: str, log) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bottler", "translate", "tests.support.translate:slow",
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
