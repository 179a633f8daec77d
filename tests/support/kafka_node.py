"""A Kafka node of a test's own: for a test that stops its broker (stopping the session's shared
one would disturb every test after it, on a broker that holds the whole suite's topics and
takes its time to come back) or that needs one configured apart (the secured broker)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from compose.kafka import KafkaNode, new_cluster_id
from compose.procs import free_port
from compose.services import kafka_ready
from tests.support.waiting import stop_gracefully, wait_for


class OwnKafka:
    """One node under ``home``, on ``port`` (PLAINTEXT unless ``settings`` say otherwise),
    started and stopped by the test; its output goes to ``home/broker.log``."""

    def __init__(self, home: Path, port: int | None = None, controller_port: int | None = None,
                 settings: dict[str, str] | None = None,
                 scram_users: dict[str, str] | None = None):
        self.port = port or free_port()
        self.node = KafkaNode(home, self.port, controller_port or free_port(), new_cluster_id(),
                              settings, scram_users)
        self.log = home / "broker.log"
        self._process: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = self.node.prepare()  # formats the storage the first time only
        with open(self.log, "ab") as out:
            self._process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        process, answers = self._process, kafka_ready(self.port)

        def ready() -> bool:
            assert process.poll() is None, self.log.read_text()[-3000:]
            return answers()

        wait_for(ready, 120, f"the test's Kafka node on port {self.port}")

    def stop(self) -> None:
        """A graceful stop (Kafka's controlled shutdown), a kill if it takes over a minute."""
        if self._process is None:
            return
        stop_gracefully(self._process)
        self._process = None


@contextmanager
def own_kafka() -> Iterator[OwnKafka]:
    """A running node of the test's own (PLAINTEXT); stopped and removed at the end."""
    with tempfile.TemporaryDirectory(prefix="bottler-kafka-") as home:
        kafka = OwnKafka(Path(home))
        kafka.start()
        try:
            yield kafka
        finally:
            kafka.stop()
