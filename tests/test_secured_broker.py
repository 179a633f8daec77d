"""A secured broker for real (issue 24, item 5): a Kafka node of the test's own whose clients
must speak SASL_SSL (SCRAM-SHA-512 over TLS, the test's own CA) and whose StandardAuthorizer
lets each principal do only what its ACLs allow (the list: docs/operations.md, "A secured
broker").

Every process is set up only through its --config file's `kafka:` section, as with any
Confluent client, and runs as a user would run it (`python -m bottler ...`): the registry, the
capture, the replica, the search view, the translator, `status`, `migrate` and `retire`. A wrong
password and a denied ACL each end in one clear line, leave nothing behind, and no password is
ever shown."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from common.kafka import READER_GROUPS
from compose.demo import seed
from compose.procs import free_port
from tests.support.cli import ROOT, assert_clear_error, bottler, clean_env
from tests.support.databases import execute, fresh_database, rows
from tests.support.secured_kafka import ADMIN, SecuredKafka, secured_kafka
from tests.support.waiting import wait_for, wait_snapshot_done

pytestmark = pytest.mark.stack

PREFIX = "shop"  # the capture's topic prefix: its principal's topics are `shop.*`
TRANSLATOR = "materializers.translators.examples.orders:translator"
TRANSLATOR_GROUP = f"{PREFIX}.bottler-translate-orders"
REPLICA_GROUP = "bottler-replica"
INDEX = "secured-probe"  # the search view's alias; its physical indices are INDEX-1, INDEX-2...
SEARCH_GROUPS = f"bottler-search-{INDEX}"  # each physical index's group
SCHEMAS = "_schemas"

TOPIC, GROUP, TXN = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.TRANSACTIONAL_ID
LITERAL, PREFIXED = ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED
Op = AclOperation
# Every reader that assigns itself its partitions: its group's coordinator (common/kafka.py).
READERS = (GROUP, READER_GROUPS, PREFIXED, [Op.DESCRIBE])

# What each principal may do: (resource type, name, pattern, operations). docs/operations.md
# lists the same, with the reasons. Kafka's READ, WRITE and DELETE imply DESCRIBE.
ACLS: dict[str, list[tuple]] = {
    "registry": [
        (TOPIC, SCHEMAS, LITERAL, [Op.CREATE, Op.DESCRIBE_CONFIGS, Op.READ, Op.WRITE]),
        READERS,
    ],
    "capture": [
        (TOPIC, f"{PREFIX}.", PREFIXED, [Op.CREATE, Op.READ, Op.WRITE, Op.DELETE]),
        (TXN, f"{PREFIX}.bottler-capture-", PREFIXED, [Op.WRITE]),  # streamed transactions
        READERS,
    ],
    "replica": [
        (TOPIC, f"{PREFIX}.", PREFIXED, [Op.READ]),
        (GROUP, REPLICA_GROUP, LITERAL, [Op.READ]),
        READERS,
    ],
    "search": [
        (TOPIC, f"{PREFIX}.", PREFIXED, [Op.READ]),
        (GROUP, SEARCH_GROUPS, PREFIXED, [Op.READ]),
        READERS,
    ],
    "translator": [
        (TOPIC, f"{PREFIX}.", PREFIXED, [Op.READ]),
        (TOPIC, f"{PREFIX}.order-events", LITERAL, [Op.CREATE, Op.WRITE]),
        (TOPIC, f"{PREFIX}._bottler.state.{TRANSLATOR_GROUP}", LITERAL, [Op.CREATE, Op.WRITE]),
        (TOPIC, f"{PREFIX}._bottler.dead-letter", LITERAL, [Op.CREATE, Op.WRITE]),
        (GROUP, TRANSLATOR_GROUP, LITERAL, [Op.READ]),
        (TXN, TRANSLATOR_GROUP, LITERAL, [Op.WRITE]),
        READERS,
    ],
    "warehouse": [
        (TOPIC, f"{PREFIX}.", PREFIXED, [Op.READ]),
        READERS,
    ],
    # may make its control topics, and write table topics, but not create them
    "limited": [
        (TOPIC, "limited._bottler.", PREFIXED, [Op.CREATE, Op.READ, Op.WRITE, Op.DELETE]),
        (TOPIC, "limited.", PREFIXED, [Op.READ, Op.WRITE]),
        READERS,
    ],
    # may see the capture's topics but not read them
    "snoop": [
        (TOPIC, f"{PREFIX}.", PREFIXED, [Op.DESCRIBE]),
        (GROUP, "bottler-search-snooped", PREFIXED, [Op.READ]),
        READERS,
    ],
    "status": [
        (TOPIC, f"{PREFIX}.", PREFIXED, [Op.DESCRIBE]),
        (GROUP, "*", LITERAL, [Op.DESCRIBE]),
        READERS,
    ],
}


def grant(kafka: SecuredKafka, user: str, acls: list[tuple]) -> None:
    admin = AdminClient(kafka.client(ADMIN))
    bindings = [AclBinding(kind, name, pattern, f"User:{user}", "*", op,
                           AclPermissionType.ALLOW)
                for kind, name, pattern, ops in acls for op in ops]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)


@dataclass
class Estate:
    kafka: SecuredKafka
    registry: str
    home: Path
    pg_dsn: str
    search: str

    def config(self, user: str, password: str | None = None, **settings) -> Path:
        """The one configuration file of a process running as ``user``."""
        path = self.home / f"{user}-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(yaml.safe_dump({"kafka": self.kafka.client(user, password),
                                        "schema_registry": self.registry, **settings}))
        path.chmod(0o600)
        return path

    @property
    def passwords(self) -> tuple[str, ...]:
        return tuple(self.kafka.passwords.values())


@pytest.fixture(scope="module")
def estate(stack, tmp_path_factory) -> Iterator[Estate]:
    """The secured node, its users and their ACLs, and the registry running on it."""
    home = tmp_path_factory.mktemp("secured")
    with secured_kafka() as kafka:
        for user, acls in ACLS.items():
            kafka.add_user(user)
            grant(kafka, user, acls)
        kafka.add_user("nobody")  # a user without a single ACL
        port = free_port()
        estate = Estate(kafka, f"http://127.0.0.1:{port}", home, stack.pg_dsn, stack.search_url)
        log = home / "registry.log"
        with open(log, "wb") as out:
            registry = subprocess.Popen(
                [sys.executable, "-m", "bottler", "registry", "serve", "--port", str(port),
                 "--topic", SCHEMAS, "--config", str(estate.config("registry"))],
                cwd=ROOT, env=clean_env(), stdout=out, stderr=subprocess.STDOUT)

        def answers() -> bool:
            assert registry.poll() is None, log.read_text()
            try:
                return httpx.get(f"{estate.registry}/subjects", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        try:
            wait_for(answers, 90, "the registry on the secured broker")
            yield estate
        finally:
            registry.terminate()
            registry.wait(30)
            text = log.read_text()
            assert not any(p in text for p in estate.passwords), "a password in the log"
            assert "Traceback" not in text, text


def run(estate: Estate, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """A bottler command, its output checked for passwords."""
    proc = bottler(*args, timeout=timeout)
    output = proc.stdout + proc.stderr
    assert not any(p in output for p in estate.passwords), f"a password leaked:\n{output}"
    return proc


def ok(proc: subprocess.CompletedProcess) -> str:
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "Traceback" not in output, output
    return proc.stdout


# -- everything works through it -------------------------------------------------------------

def test_every_process_works_through_sasl_ssl_and_acls(estate, source, tmp_path):
    seed(source)  # the demo shop: the translator's orders among its tables
    execute(source, "create table probe (id int primary key, v text)",
            "insert into probe select g, 'v' || g from generate_series(1, 50) g")
    metrics_port = free_port()
    log = tmp_path / "capture.log"
    slot = f"sec_{uuid.uuid4().hex[:6]}"
    capture_config = estate.config("capture", postgres=source)
    with open(log, "wb") as out:
        capture = subprocess.Popen(
            [sys.executable, "-m", "bottler", "capture", "-s", slot, "-p", PREFIX,
             "--metrics-port", str(metrics_port), "--config", str(capture_config)],
            cwd=ROOT, env=clean_env(), stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_snapshot_done(capture, log, metrics_port, 180)
        execute(source, "insert into probe values (51, 'streamed')")
        with fresh_database(estate.pg_dsn) as target:
            try:
                _views(estate, source, target, slot, tmp_path)
            except BaseException:
                print(log.read_text()[-6000:])
                raise
    finally:
        capture.terminate()
        capture.wait(30)
    text = log.read_text()
    assert not any(p in text for p in estate.passwords)
    assert "Traceback" not in text, text
    assert "not streamed" not in text, text  # its Kafka transactions are granted

    # retired by its own principal: its topics, subjects, slot and publication go
    shown = ok(run(estate, "retire", "-s", slot, "-p", PREFIX, "--yes",
                   "--config", str(capture_config)))
    assert f"topic {PREFIX}.probe" in shown, shown
    left = {t for t in topics(estate) if t.startswith(f"{PREFIX}.")}
    assert left == {f"{PREFIX}.order-events"}, left  # the translator's, not the capture's
    assert rows(source, "select slot_name from pg_replication_slots") == []


def _views(estate: Estate, source: str, target: str, slot: str, tmp_path: Path) -> None:
    prefix = ["--topic-prefix", PREFIX]
    replica = estate.config("replica", target=target)

    def replicated() -> bool:  # the streamed row too, once the capture published it
        ok(run(estate, "materialize", "postgres", "-g", REPLICA_GROUP, "--once", *prefix,
               "--config", str(replica)))
        return rows(target, "select count(*) from probe") == [(51,)]

    wait_for(replicated, 120, "the replica")

    search = estate.config("search", search=estate.search)
    ok(run(estate, "materialize", "search", "--index", INDEX, "--topic", f"{PREFIX}.probe",
           "--once", *prefix, "--config", str(search)))
    httpx.post(f"{estate.search}/{INDEX}/_refresh")
    assert httpx.get(f"{estate.search}/{INDEX}/_count").json()["count"] == 51
    ok(run(estate, "reindex", INDEX, "--topic", f"{PREFIX}.probe", "--timeout", "120", *prefix,
           "--config", str(search)))
    assert httpx.get(f"{estate.search}/{INDEX}/_count").json()["count"] == 51
    assert "lag" in ok(run(estate, "reindex", INDEX, "--status", "--config", str(search)))

    ok(run(estate, "translate", TRANSLATOR, "--once", *prefix,
           "--config", str(estate.config("translator"))))
    events = AdminClient(estate.kafka.client(ADMIN)).list_topics(timeout=10).topics
    assert f"{PREFIX}.order-events" in events

    shown = ok(run(estate, "status", "--once",
                   "--config", str(estate.config("status", postgres=source))))
    assert f"{PREFIX}.probe" in shown, shown
    migrate = estate.config("replica", source=source, target=target)
    shown = ok(run(estate, "migrate", "status", "--group", REPLICA_GROUP, *prefix,
                   "--config", str(migrate)))
    assert "caught up: yes" in shown, shown
    shown = ok(run(estate, "migrate", "cutover", "--group", REPLICA_GROUP, "--slot", slot,
                   "--dry-run", *prefix, "--config", str(migrate)))
    assert "verdict: ready" in shown, shown

    shown = ok(run(estate, "materialize", "warehouse", "--path", str(tmp_path / "wh"), "--topic",
                   f"{PREFIX}.probe", "--once", *prefix,
                   "--config", str(estate.config("warehouse"))))
    assert "51 changes" in shown, shown


# -- a wrong password, a denied ACL ----------------------------------------------------------

WRONG = "Wrong" + uuid.uuid4().hex[:10]


def commands(source: str, target: str) -> dict[str, tuple[list[str], dict]]:
    """A command of each principal, as in the test above, and its file's other settings."""
    prefix = ["--topic-prefix", PREFIX]
    return {
        "capture": (["capture", "-s", "wrong_pw", "-p", PREFIX], {"postgres": source}),
        "replica": (["materialize", "postgres", "-g", REPLICA_GROUP, "--once", *prefix],
                    {"target": target}),
        "search": (["materialize", "search", "--index", INDEX, "--once", *prefix], {}),
        "translator": (["translate", TRANSLATOR, "--once", *prefix], {}),
        "status": (["status", "--once"], {"postgres": source}),
        "registry": (["registry", "serve", "--port", str(free_port())], {}),
    }


@pytest.mark.parametrize("user", ["capture", "replica", "search", "translator", "status",
                                  "registry"])
def test_a_wrong_password_is_one_clear_line(estate, source, user):
    args, settings = commands(source, source)[user]
    config = estate.config(user, password=WRONG, search=estate.search, **settings)
    proc = run(estate, *args, "--config", str(config), timeout=120)
    if user == "status":  # the dashboard shows what it can, and says what it cannot
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "Authentication failed" in proc.stdout and WRONG not in proc.stdout
        return
    assert_clear_error(proc, "refused the credentials", "Authentication failed",
                       estate.kafka.bootstrap, "sasl.password=***", "sasl.username",
                       secrets=(WRONG, *estate.passwords))
    if user == "capture":
        assert rows(source, "select slot_name from pg_replication_slots") == []
        assert rows(source, "select pubname from pg_publication") == []


def topics(estate: Estate) -> set[str]:
    return set(AdminClient(estate.kafka.client(ADMIN)).list_topics(timeout=10).topics)


def test_a_capture_refused_a_topic_leaves_nothing_behind(estate, source):
    """`limited` may create its control topics but not its table topics: the start fails in
    one line naming the topic and the operation, and undoes what it made (the control topics,
    the publication, the slot)."""
    execute(source, "create table probe (id int primary key, v text)",
            "insert into probe values (1, 'one')")
    before = topics(estate)
    config = estate.config("limited", postgres=source)
    proc = run(estate, "capture", "-s", "limited", "-p", "limited", "--config", str(config))
    assert_clear_error(proc, "does not allow", "CREATE topic limited.probe",
                       secrets=estate.passwords)
    assert topics(estate) == before
    assert rows(source, "select slot_name from pg_replication_slots") == []
    assert rows(source, "select pubname from pg_publication") == []
    # nor its Kafka transactions: refused before anything is made when they are asked for
    proc = run(estate, "capture", "-s", "limited", "-p", "limited", "--config", str(config),
               "--stream-large-transactions", "on")
    assert_clear_error(proc, "does not allow user limited to WRITE transactional id "
                       "limited.bottler-capture-limited", secrets=estate.passwords)
    assert topics(estate) == before
    assert rows(source, "select slot_name from pg_replication_slots") == []


def test_a_view_refused_its_group_says_so(estate, source):
    config = estate.config("replica", target=source)
    proc = run(estate, "materialize", "postgres", "-g", "someone-elses", "--once",
               "--topic-prefix", PREFIX, "--config", str(config))
    assert_clear_error(proc, "does not allow user replica to READ consumer group someone-elses",
                       secrets=estate.passwords)


def test_a_view_refused_a_topic_says_so(estate, source):
    topic = f"{PREFIX}.snooped"  # snoop may see it (DESCRIBE), not READ it
    admin = AdminClient(estate.kafka.client(ADMIN))
    with contextlib.suppress(KafkaException):
        admin.create_topics([NewTopic(topic, 1)])[topic].result(timeout=30)
    producer = Producer(estate.kafka.client(ADMIN))
    producer.produce(topic, key=b"k", value=b"v")
    assert producer.flush(30) == 0
    config = estate.config("snoop", search=estate.search)
    proc = run(estate, "materialize", "search", "--index", "snooped", "--topic", topic,
               "--once", "--topic-prefix", PREFIX, "--config", str(config))
    # the first refusal met: the topic, or the prefix's truncate topic, which the view reads too
    assert_clear_error(proc, f"does not allow user snoop to READ topic {PREFIX}.",
                       secrets=estate.passwords)


def test_a_registry_refused_its_topic_says_so(estate):
    """`nobody` has no ACL at all: the registry stops at its first request, naming it."""
    proc = run(estate, "registry", "serve", "--port", str(free_port()), "--topic", "_schemas2",
               "--config", str(estate.config("nobody")), timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in output, output
    assert "does not allow user nobody to CREATE topic _schemas2" in output, output
    assert "_schemas2" not in topics(estate)


def test_a_translator_refused_its_state_topic_says_so(estate):
    """Another group id than its ACLs name: its state changelog may not be created."""
    inputs = f"{PREFIX}.orders"  # the capture's, when the first test ran; else made here
    admin = AdminClient(estate.kafka.client(ADMIN))
    if inputs not in topics(estate):
        admin.create_topics([NewTopic(inputs, 1)])[inputs].result(timeout=30)
    group = f"{PREFIX}.elsewhere"
    proc = run(estate, "translate", TRANSLATOR, "--once", "--topic-prefix", PREFIX,
               "--group-id", group, "--config", str(estate.config("translator")))
    assert_clear_error(proc, "does not allow user translator to CREATE topic "
                       f"{PREFIX}._bottler.state.{group}", secrets=estate.passwords)
