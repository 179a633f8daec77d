"""librdkafka's log lines go through the project's logging, each kind at most once a minute
(issue 25): a capture whose broker is down for 15 s writes a few lines, not the ~50 raw ones
its Kafka clients wrote before (its state and dead-letter producers had no logger), and
carries on once the broker is back."""

from __future__ import annotations

import logging
import re
import time
from types import SimpleNamespace

from common.logs import RateLimited
from tests.support.capture import capture_process
from tests.support.databases import execute
from tests.support.kafka_node import own_kafka
from tests.support.topics import topic_state
from tests.support.waiting import wait_streaming

RAW = re.compile(rb"%\d\|\d+\.\d+\|")  # librdkafka's own stderr format


def test_a_kind_of_line_is_logged_once_per_interval_with_the_count_held_back(caplog):
    log = RateLimited(logging.getLogger("librdkafka"), interval=0.5)
    refused = "[thrd:127.0.0.1:{0}/bootstrap]: Connect to ipv4#127.0.0.1:{0} failed: refused"
    with caplog.at_level(logging.INFO, logger="librdkafka"):
        for i in range(5):
            log.log(logging.ERROR, "%s [%s] %s", "FAIL", f"rdkafka#producer-{i}",
                    refused.format(9092 + i))
        log.log(logging.WARNING, "%s [%s] %s", "REQTMOUT", "rdkafka#producer-1", "timed out")
        time.sleep(0.6)
        log.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-9", refused.format(1))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("FAIL [rdkafka#producer-0]") and "REQTMOUT" in lines[1]
    assert lines[2].endswith("(4 more like it in the last 1 s)"), lines[2]


def test_a_capture_whose_broker_is_down_logs_a_few_lines(stack, source, prefix, tmp_path):
    execute(source, "create table items (id int primary key)",
            "insert into items select generate_series(1, 10)")
    log = tmp_path / "capture.log"
    with own_kafka() as kafka:  # a broker of its own to stop: the session's serves every test
        topics = SimpleNamespace(kafka=kafka.bootstrap, registry_url=stack.registry_url)
        proc = capture_process(["--postgres", source, "--broker", kafka.bootstrap,
                                "--schema-registry", stack.registry_url, "--slot", prefix,
                                "--topic-prefix", prefix, "--heartbeat-interval", "1"], log)
        try:
            wait_streaming(source, prefix)
            topic_state(topics, f"{prefix}.items", 10)
            kafka.stop()
            try:
                quiet_from = log.stat().st_size
                execute(source, "insert into items values (11)")  # waits in the producer
                time.sleep(15)  # librdkafka's clients wrote ~50 raw lines in as long
                assert proc.poll() is None, log.read_text()
                during = log.read_bytes()[quiet_from:]
            finally:
                kafka.start()
            assert not RAW.search(during), during.decode(errors="replace")
            lines = during.decode(errors="replace").splitlines()
            assert len(lines) <= 12, "\n".join(lines)
            topic_state(topics, f"{prefix}.items", 11)  # it carried on
            assert proc.poll() is None, log.read_text()
        finally:
            proc.terminate()
            proc.wait(60)
