"""Kafka connections (bootstrap servers alone, or every client property), the check every
process makes before it starts, the consumer settings every reader of a backlog shares, and what
a topic prefix may be."""

import logging
import re
import time
import uuid
from collections.abc import Mapping
from typing import Any

from common.errors import BottlerError
from common.logs import RateLimited
from common.redact import mask_properties

# Where a process connects: the bootstrap servers, or librdkafka's properties (the settings'
# `kafka`, bootstrap.servers included), given to every client the process makes.
Connection = str | Mapping[str, str]


# Where every client's librdkafka log lines go (its ``logger`` property): the project's logging,
# each kind of line at most once a minute. A broker that is down makes each client log every
# reconnect: about 190 raw lines a minute for a capture.
LIBRDKAFKA_LOG = RateLimited(logging.getLogger("librdkafka"))


def properties(connection: Connection) -> dict[str, str]:
    """The connection's client properties, bootstrap.servers included."""
    return ({"bootstrap.servers": connection} if isinstance(connection, str)
            else dict(connection))


def client_config(connection: Connection, **ours: Any) -> dict[str, Any]:
    """A client's configuration: the connection's properties, librdkafka's log lines into ours
    (``LIBRDKAFKA_LOG``), then the client's own settings (its group.id, isolation level...;
    they are what the client relies on). Every Kafka client is made from one."""
    return {**properties(connection), "logger": LIBRDKAFKA_LOG, **ours}


# A reader that assigns itself its partitions (it joins no group and commits nothing) still needs
# a group.id: confluent-kafka requires one, and librdkafka looks that group's coordinator up,
# which a secured broker allows only to a principal with DESCRIBE on the group. Every such
# reader's group begins with READER_GROUPS, so one ACL (groups of that prefix: DESCRIBE) serves
# them all (docs/operations.md, "A secured broker"); the random rest keeps readers apart.
READER_GROUPS = "bottler-reader-"


def reader_config(connection: Connection, purpose: str, **ours: Any) -> dict[str, Any]:
    """The configuration of a consumer that assigns itself its partitions, or only looks
    (metadata, watermarks): a group of its own under READER_GROUPS, nothing committed."""
    return client_config(connection, **{
        "group.id": f"{READER_GROUPS}{purpose}-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",  # librdkafka's default, said: see consumer_config
        **ours})


def servers(connection: Connection) -> str:
    """The bootstrap servers of a connection, fit to show."""
    return connection if isinstance(connection, str) else connection.get("bootstrap.servers", "")


def described(connection: Connection) -> str:
    """The connection in one line for an error: the servers and the properties given (secret
    ones masked), so that a wrong property is named where it fails."""
    return servers(connection) + properties_shown(connection)


def properties_shown(connection: Connection) -> str:
    """` (with prop=value …)` for the properties besides bootstrap.servers, secrets masked."""
    if isinstance(connection, str):
        return ""
    props = mask_properties({k: v for k, v in connection.items() if k != "bootstrap.servers"})
    shown = " ".join(f"{k}={v}" for k, v in sorted(props.items()))
    return f" (with {shown})" if shown else ""


# librdkafka's errors that no retry mends: a wrong protocol, certificate or password.
_HOPELESS = ("SSL", "SASL", "Authentication", "authentication", "handshake", "certificate",
             "Unsupported", "Disconnected while requesting ApiVersion")


def client_failure(client: Any, errors: list, exc: Exception) -> Any:
    """Why a client's request failed (a KafkaError): the client's own error, reported through
    its ``error_cb`` into ``errors`` (a refused password, a failed TLS handshake), rather than
    the request's bare "Broker transport failure". The callback runs only when the client is
    polled: this polls it."""
    from confluent_kafka import KafkaError

    client.poll(0)
    causes = [e for e in errors if e.code() != KafkaError._ALL_BROKERS_DOWN]
    errors.clear()
    return causes[-1] if causes else exc.args[0]


def refused_credentials(connection: Connection, reason: str) -> BottlerError:
    return BottlerError(
        f"the Kafka broker at {servers(connection)} refused the credentials"
        f"{properties_shown(connection)}: {reason}",
        "check sasl.username and sasl.password (and sasl.mechanism) in the `kafka:` section of "
        "the --config file (or BOTTLER_KAFKA_CONFIG)")


SECURED_DOC = "docs/operations.md, \"A secured broker\""


def is_denied(error: Any) -> bool:
    """Whether a KafkaError is the broker's refusal under its ACLs (no retry mends it)."""
    from confluent_kafka import KafkaError

    return error is not None and error.code() in (
        KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


def denied(connection: Connection | None, operation: str, resource: str,
           error: Any) -> BottlerError:
    """The one line for a request an ACL refused: who may not do what to which resource.
    ``operation`` is Kafka's ACL operation (READ, WRITE, CREATE...), ``resource`` names it
    ("topic shop.orders", "consumer group bottler-replica")."""
    user = connection.get("sasl.username") if isinstance(connection, Mapping) else None
    who = f"user {user}" if user else "this client's principal"
    at = f" at {servers(connection)}" if connection else ""
    return BottlerError(
        f"Kafka{at} does not allow {who} to {operation} {resource}: {error.str()}",
        f"grant {who} {operation} on {resource} (an ACL: the list per process is in "
        f"{SECURED_DOC}), or use a principal that has it")


def check_broker(connection: Connection, timeout: float = 10.0) -> None:
    """Fail in one line, within seconds, when the broker cannot be used with the connection's
    properties (a TLS or SASL setting the broker does not speak, or a wrong password, fails at
    its first answer); librdkafka itself would retry, and log, for ever. A broker that does not
    answer is waited for up to ``timeout`` seconds (said once in the log)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list = []
    admin = AdminClient(client_config(connection, log_level=0, error_cb=errors.append))
    deadline = time.monotonic() + timeout
    errors_said = False
    while True:
        try:
            admin.list_topics(timeout=1)
            return
        except KafkaException as exc:
            cause = client_failure(admin, errors, exc)
        reason = cause.str()
        if cause.code() == KafkaError._AUTHENTICATION:
            raise refused_credentials(connection, reason)
        hopeless = any(word in reason for word in _HOPELESS)
        if not hopeless and not errors_said:
            errors_said = True
            logging.getLogger(__name__).info(
                "waiting up to %.0f s for the Kafka broker at %s: %s", timeout,
                servers(connection), reason)
        if hopeless or time.monotonic() >= deadline:
            raise BottlerError(
                f"the Kafka broker at {servers(connection)} is unreachable"
                f"{properties_shown(connection)}: {reason}",
                "check --broker (BOTTLER_KAFKA) and the Kafka client properties (-C, "
                "BOTTLER_KAFKA_CONFIG, the `kafka:` section of the --config file)")

def await_topics(admin, names, timeout: float = 30.0) -> None:
    """Wait until the broker's metadata shows each of ``names`` with a leader for every
    partition: Kafka answers CreateTopics once the controller has the topic, a moment before
    the brokers serve it (a describe or a fetch then says "unknown topic"). Returns at the
    timeout either way: what comes next fails with its own, clearer, error."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    wanted = set(names)
    while wanted and time.monotonic() < deadline:
        try:
            known = admin.list_topics(timeout=5).topics
        except KafkaException:
            known = {}
        wanted = {t for t in wanted if t not in known or known[t].error is not None
                  or not known[t].partitions
                  or any(p.leader < 0 for p in known[t].partitions.values())}
        if wanted:
            time.sleep(0.01)  # a metadata request is cheap, and a capture's start waits here


def settled(futures: Mapping[Any, Any]) -> dict[Any, Any]:
    """Each of an admin request's futures once all are done: its result, or the exception it
    failed with, returned, not raised. A raised exception's traceback holds the raising frame,
    and through it the client and the futures: a reference cycle that the collector may free in
    the client's own librdkafka thread (while it resolves a future), which aborts the process
    ("rd_kafka_destroy() called from librdkafka owned thread"; seen when a view dropped its admin
    client after a failed read)."""
    import concurrent.futures

    concurrent.futures.wait(list(futures.values()))
    return {key: future.exception() or future.result() for key, future in futures.items()}


def stable_ends(connection: Connection, partitions: list[tuple[str, int]],
                timeout: float = 10.0) -> dict[tuple[str, int], int]:
    """Each partition's last stable offset: where a read_committed reader's log ends now (the
    first offset of the oldest transaction still open, else the high watermark). A reader that
    waits for its end-of-partition event instead may wait for ever behind a busy transactional
    writer, whose every fetch brings a little more."""
    return _log_ends(connection, partitions, timeout, committed=True)


def high_watermarks(connection: Connection, partitions: list[tuple[str, int]],
                    timeout: float = 10.0, admin=None) -> dict[tuple[str, int], int]:
    """Each partition's high watermark: the end of its log, open transactions included.
    ``admin``: an AdminClient of ``connection`` to ask through (a new one connects first)."""
    return _log_ends(connection, partitions, timeout, committed=False, admin=admin)


def _log_ends(connection: Connection, partitions: list[tuple[str, int]], timeout: float,
              committed: bool, admin=None) -> dict[tuple[str, int], int]:
    from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    if not partitions:
        return {}
    admin = admin or AdminClient(client_config(connection))
    asked = {TopicPartition(t, p): OffsetSpec.latest() for t, p in partitions}
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    deadline = time.monotonic() + timeout
    while True:
        try:
            answers = settled(admin.list_offsets(asked, isolation_level=isolation,
                                                 request_timeout=timeout))
        except KafkaException as exc:
            answers = {None: exc}
        failure = next((a for a in answers.values() if isinstance(a, KafkaException)), None)
        if failure is None:
            return {(tp.topic, tp.partition): answer.offset for tp, answer in answers.items()}
        if passing(failure.args[0]) and time.monotonic() < deadline:
            time.sleep(0.02)  # a topic just made, or a broker just started: no leader yet
            continue
        topics = ", ".join(sorted({t for t, _ in partitions}))
        raise BottlerError(f"cannot read the end offsets of {topics} from Kafka at "
                           f"{servers(connection)}: {failure.args[0].str()}",
                           "check that the broker is up, then start again")


_PASSING = {"_PARTITION_EOF", "NOT_LEADER_FOR_PARTITION", "LEADER_NOT_AVAILABLE",
            "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH"}


def passing(error) -> bool:
    """A Kafka error that passes by itself: the end of a partition, a leader moving or not
    elected yet (a topic just made, a broker just started), or one librdkafka calls
    retriable."""
    from confluent_kafka import KafkaError

    return (error.code() in {getattr(KafkaError, name) for name in _PASSING}
            or (error.retriable() and not error.fatal()))


_AWAY = {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT", "_RESOLVE"}


def broker_away(error) -> bool:
    """A Kafka error of a broker not answering for now (restarting, slow to start on a busy
    machine, a connection lost) or one that passes by itself: a reader waits, it does not stop."""
    from confluent_kafka import KafkaError

    return error.code() in {getattr(KafkaError, name) for name in _AWAY} or passing(error)


# Kafka's topic names: ASCII letters, digits, '.', '_' and '-', at most 249 characters. A
# prefix is checked up front: a broker that takes another character still leaves names the
# registry's URLs cannot carry (`<topic>-value` subjects).
_LEGAL = re.compile(r"[A-Za-z0-9._-]*")
PREFIX_MAX = 200  # leaves room for the schema and table names


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` cannot begin topic names, or None if it can."""
    if not _LEGAL.fullmatch(prefix):
        return ("a topic prefix may contain only ASCII letters, digits, '.', '_' and '-'"
                " (Kafka's topic names)")
    if len(prefix) > PREFIX_MAX:
        return f"a topic prefix may be at most {PREFIX_MAX} characters"
    return None
