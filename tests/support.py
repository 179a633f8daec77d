"""Helpers for end-to-end tests: fresh source databases, reading topics back, waiting."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext


def wait_snapshot_done(capture, log, metrics_port: int, timeout: float) -> None:
    """Wait until the capture process ``capture`` (its output in ``log``) says on its metrics
    endpoint that its snapshot is complete; fail with its log's end should it exit first."""
    import httpx

    def done() -> bool:
        assert capture.poll() is None, log.read_text()[-3000:]
        try:
            page = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=1).text
        except httpx.HTTPError:
            return False
        return "bottler_capture_snapshot_complete 1.0" in page

    wait_for(done, timeout, "the capture's snapshot")


def wait_for(predicate: Callable[[], object], timeout: float = 30, what: str = "condition"):
    from tests.capture_support import CaptureThread

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        CaptureThread.raise_failures()
        if result := predicate():
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


class WriteLoad(threading.Thread):
    """Commits small transactions against ``dsn`` until stopped: each a ``transaction(conn,
    rnd)`` of the subclass, then its ``after_commit(conn)``; ``commits`` counts them and an
    exception ends the load and waits in ``error`` for the test to report it."""

    seed = 0
    pause = 0.003  # seconds between transactions

    def __init__(self, dsn: str):
        super().__init__(daemon=True)
        self.dsn = dsn
        self.stopped = threading.Event()
        self.commits = 0
        self.error: BaseException | None = None

    def transaction(self, conn: psycopg.Connection, rnd) -> None:
        raise NotImplementedError

    def after_commit(self, conn: psycopg.Connection) -> None:
        pass

    def run(self) -> None:
        import random

        rnd = random.Random(self.seed)
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stopped.is_set():
                    with conn.transaction():
                        self.transaction(conn, rnd)
                    self.commits += 1
                    self.after_commit(conn)
                    time.sleep(self.pause)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc


def with_database(dsn: str, name: str) -> str:
    return dsn.rsplit("/", 1)[0] + "/" + name


@contextmanager
def fresh_database(admin_dsn: str) -> Iterator[str]:
    """A new empty database; on exit its slots are dropped and it is removed."""
    name = f"src_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f"create database {name}")
    try:
        yield with_database(admin_dsn, name)
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            for (slot, pid) in conn.execute(
                "select slot_name, active_pid from pg_replication_slots where database = %s",
                (name,),
            ).fetchall():
                if pid:
                    conn.execute("select pg_terminate_backend(%s)", (pid,))
                    time.sleep(0.5)
                conn.execute("select pg_drop_replication_slot(%s)", (slot,))
            conn.execute(f"drop database {name} with (force)")


def read_topic(bootstrap: str, topic: str) -> list:
    """Every message of ``topic``, partition by partition, up to the current end; KeyError if
    the topic does not exist."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        # Ask for all topics: asking for one by name may make the broker auto-create it.
        metadata = consumer.list_topics(timeout=10).topics[topic]
        messages = []
        for p in sorted(metadata.partitions):
            _, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            if high == 0:
                continue
            consumer.assign([TopicPartition(topic, p, 0)])
            while True:
                msg = consumer.poll(10)
                assert msg is not None, f"no message from {topic}[{p}] before offset {high}"
                assert not msg.error(), msg.error()
                messages.append(msg)
                if msg.offset() + 1 >= high:
                    break
        return messages
    finally:
        consumer.close()


def read_committed(bootstrap: str, topic: str, isolation: str = "read_committed") -> list:
    """Every message of ``topic`` a consumer of that isolation level sees, up to the end it sees
    now ([] if the topic does not exist): for read_committed, the last stable offset (where the
    oldest transaction still open begins: a busy transactional writer always has one), else the
    high watermark. A partition is read once the consumer's position reached that end (past
    transaction markers and aborted messages) or it said end of partition."""
    from common.kafka import stable_ends

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}",
                         "isolation.level": isolation, "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        meta = consumer.list_topics(timeout=10).topics.get(topic)
        if meta is None:
            return []
        if isolation == "read_committed":
            ends = {p: end for (_, p), end in stable_ends(
                bootstrap, [(topic, p) for p in meta.partitions]).items()}
        else:
            ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10,
                                                      cached=False)[1] for p in meta.partitions}
        pending = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in pending])
        messages = []
        last = time.monotonic()  # of the last message or end
        while pending:
            msg = consumer.poll(1.0)
            if msg is not None:
                last = time.monotonic()
            if msg is not None and msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                pending.discard(msg.partition())
            elif msg is not None:
                messages.append(msg)
                if msg.offset() + 1 >= ends[msg.partition()]:
                    pending.discard(msg.partition())
            else:
                at = consumer.position([TopicPartition(topic, p) for p in pending])
                pending -= {tp.partition for tp in at if tp.offset >= ends[tp.partition]}
                assert time.monotonic() - last < 30, f"{topic}: stuck 30 s before {ends}"
        return [m for m in messages if m.offset() < ends[m.partition()]]
    finally:
        consumer.close()


@contextmanager
def in_thread(run: Callable[[threading.Event], object]) -> Iterator[list[BaseException]]:
    """``run(stop)`` (a reader's or runner's loop) in a thread for the body of the ``with``.
    Yields the list its exception lands in, for the test to check while it waits; on exit sets
    ``stop``, waits for the thread and raises that exception."""
    stop = threading.Event()
    failure: list[BaseException] = []

    def target():
        try:
            run(stop)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield failure
    finally:
        stop.set()
        thread.join(60)
    assert not thread.is_alive()
    if failure:
        raise failure[0]


class Decoder:
    """Decodes with confluent-kafka's own AvroDeserializer (what any consumer would use)."""

    def __init__(self, registry_url: str):
        self._deserializer = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))

    def key(self, msg):
        ctx = SerializationContext(msg.topic(), MessageField.KEY)
        return self._deserializer(msg.key(), ctx) if msg.key() is not None else None

    def value(self, msg):
        ctx = SerializationContext(msg.topic(), MessageField.VALUE)
        return self._deserializer(msg.value(), ctx) if msg.value() is not None else None

    def table_state(self, messages) -> dict:
        """The table a compacted topic describes: last value per key, tombstones removing."""
        state = {}
        for msg in messages:
            key = tuple(sorted(self.key(msg).items()))
            value = self.value(msg)
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        return state


def wait_streaming(dsn: str, slot: str, timeout: float = 60) -> None:
    """Wait until a capture streams from ``slot`` (its snapshot, if any, is complete).

    The slot is active during the snapshot too (the connection that exported the snapshot holds
    it, its walsender in state `startup`); only START_REPLICATION moves the walsender on to
    `catchup` and `streaming`."""

    def active():
        with psycopg.connect(dsn) as conn:
            return conn.execute(
                "select r.state in ('catchup', 'streaming') from pg_replication_slots s"
                " join pg_stat_replication r on r.pid = s.active_pid where s.slot_name = %s",
                (slot,)).fetchone() == (True,)

    wait_for(active, timeout, f"a capture streaming from slot {slot}")


def execute(dsn: str, *statements: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        for statement in statements:
            conn.execute(statement)


def rows(dsn: str, query: str) -> list[tuple]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


def topic_state(stack, topic: str, expected_keys: int | None = None) -> dict:
    decoder = Decoder(stack.registry_url)

    def state():
        try:
            messages = read_topic(stack.kafka, topic)
        except KeyError:  # the topic does not exist yet
            return None
        current = decoder.table_state(messages)
        if expected_keys is None or len(current) == expected_keys:
            return [current]  # truthy even when empty
        return None

    return wait_for(state, 60, f"{topic} to hold {expected_keys} keys")[0]


def own_topics(bootstrap: str, prefix: str, *tables: tuple[str, str, list[str]]) -> None:
    """Record the table topics of ``tables`` ((schema, table, key columns)) as the capture of
    ``prefix`` does (capture/setup/state.py, schemas/ownership.py): for hand-made table topics,
    which a view given no --topic reads only once their capture says they are its own."""
    from confluent_kafka.admin import AdminClient

    from capture.setup.state import CaptureState, TopicOwnership
    from capture.setup.topics import ensure_topics
    from schemas.topics import table_topic

    state = CaptureState(bootstrap, prefix)
    ensure_topics(AdminClient({"bootstrap.servers": bootstrap}), [state.topic])
    owner = TopicOwnership(state, prefix, prefix or "test", "avro")
    for schema, table, key in tables:
        owner.claim(schema, table, table_topic(prefix, schema, table), key)
    state.close()
