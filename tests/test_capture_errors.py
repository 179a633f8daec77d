"""Least privilege and bad input (issue 3, point 8), end to end: the capture runs as a role with
only LOGIN REPLICATION and SELECT, and every start-up mistake ends in one clear line with a hint,
exit code 2, no traceback, and no password anywhere in what the user sees (errors and logs).

Errors are checked through the real command line (`python -m bottler ...` as a child process), as
a user meets them. Each test has its own database, role, slot and topic prefix."""

from __future__ import annotations

import secrets
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import psycopg
import psycopg2
import psycopg2.extras
import pytest
from confluent_kafka.admin import AdminClient
from psycopg.conninfo import conninfo_to_dict

from common.pg import emit_message_function
from compose.postgres import PostgresCluster
from compose.procs import free_port
from compose.stack import new_stack_dir
from tests.support.capture import CaptureThread
from tests.support.cli import ROOT, assert_clear_error, bottler, clean_env, services
from tests.support.databases import execute
from tests.support.topics import Decoder, read_topic
from tests.support.waiting import wait_for

SCHEMA = """
create table items (id int primary key, name text not null);
insert into items select g, 'item ' || g from generate_series(1, 20) g;
create table secret (id int primary key, card text);
insert into secret values (1, '4111 1111 1111 1111');
"""


# -- helpers ---------------------------------------------------------------------------------


def dsn_of(admin_dsn: str, user: str, password: str) -> str:
    info = conninfo_to_dict(admin_dsn)
    return f"postgresql://{user}:{password}@{info['host']}:{info['port']}/{info['dbname']}"


def scalar(dsn: str, query: str, *params):
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query, params).fetchone()
        return row[0] if row else None


def password_of(dsn: str) -> str:
    password = conninfo_to_dict(dsn)["password"]
    assert len(password) >= 8  # a real password, or the "absent" checks prove nothing
    return password


@dataclass
class Role:
    name: str
    password: str
    dsn: str


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def items_and_secret(source) -> None:
    """The test's source database (as the superuser, whose DSN carries a password) holds two
    tables: `items` and `secret`."""
    execute(source, SCHEMA)


@pytest.fixture
def passwords(stack) -> list[str]:
    """Every password a test must never show; make_role adds the roles' ones."""
    return [password_of(stack.pg_dsn)]


@pytest.fixture
def make_role(source, passwords):
    """make_role(replication=..., select=[tables]): a role with only LOGIN (and REPLICATION),
    CONNECT on the database, USAGE on public and SELECT on the given tables; dropped after."""
    made: list[str] = []

    def make(replication: bool = True, select: tuple[str, ...] = ("items",)) -> Role:
        name = f"cap_{uuid.uuid4().hex[:8]}"
        password = "Pw" + secrets.token_hex(10)
        passwords.append(password)
        dbname = conninfo_to_dict(source)["dbname"]
        execute(
            source,
            f"create role {name} login {'replication' if replication else ''} "
            f"password '{password}'",
            f"grant connect on database {dbname} to {name}",
            f"grant usage on schema public to {name}",
            *(f"grant select on {t} to {name}" for t in select),
        )
        made.append(name)
        return Role(name, password, dsn_of(source, name, password))

    yield make
    for name in made:
        execute(source, f"drop owned by {name}")
        execute(source.rsplit("/", 1)[0] + "/postgres", f"drop role if exists {name}")


@pytest.fixture
def publication(source, prefix) -> str:
    """A publication of `items`, created by the superuser (the tables' owner could, too)."""
    name = f"pub_{prefix}"
    execute(source, f"create publication {name} for table items")
    return name


# -- 1. least privilege works end to end -----------------------------------------------------

@pytest.mark.parametrize("heartbeats_allowed", [True, False], ids=["heartbeats", "no-heartbeats"])
def test_a_role_with_replication_and_select_only_captures_end_to_end(
    stack, source, prefix, make_role, publication, passwords, tmp_path, heartbeats_allowed
):
    role = make_role()
    if not heartbeats_allowed:  # a hardened server: the role may not emit heartbeat messages
        with psycopg.connect(source) as conn:  # its signatures as this server has them (17: 4)
            variants = [r[0] for r in conn.execute(
                "select oid::regprocedure::text from pg_proc "
                "where proname = 'pg_logical_emit_message'")]
            text_variant = emit_message_function(conn)
        execute(source, *(f"revoke execute on function {v} from public" for v in variants))
        assert not scalar(source, "select has_function_privilege(%s, %s, 'execute')",
                          role.name, text_variant)
    log = tmp_path / "capture.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bottler", "capture", "-d", role.dsn, "-s", prefix,
             "-p", prefix, "--publication", publication, *services(stack),
             "--heartbeat-interval", "0.5", "--snapshot-workers", "1"],
            stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=clean_env(),
        )
    decoder = Decoder(stack.registry_url)

    def items(n: int):
        def state():
            assert proc.poll() is None, f"capture exited:\n{log.read_text()}"
            try:
                current = decoder.table_state(read_topic(stack.kafka, f"{prefix}.items"))
            except KeyError:
                return None
            return current if len(current) == n else None
        return state

    try:
        snapshot = wait_for(items(20), 60, "the snapshot of items")
        assert snapshot[(("id", 7),)] == {"id": 7, "name": "item 7"}
        execute(source, "insert into items values (21, 'streamed')")
        streamed = wait_for(items(21), 30, "the streamed insert")
        assert streamed[(("id", 21),)] == {"id": 21, "name": "streamed"}
        if heartbeats_allowed:
            wait_for(lambda: _messages(stack, f"{prefix}._bottler.heartbeat"), 30, "a heartbeat")
        else:
            wait_for(lambda: "heartbeats are off" in log.read_text(), 30, "the warning")
            execute(source, "insert into items values (22, 'after the warning')")
            wait_for(items(22), 30, "an insert after heartbeats were turned off")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            returncode = proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
    output = log.read_text()
    assert returncode == 0, output
    assert "Traceback" not in output
    for password in passwords:
        assert password not in output
    assert role.name in output and "***" in output  # the DSN is logged, masked
    # Only the published table became a topic; the unreadable `secret` table was never touched.
    topics = AdminClient({"bootstrap.servers": stack.kafka}).list_topics(timeout=10).topics
    assert f"{prefix}.items" in topics and f"{prefix}.secret" not in topics


def _messages(stack, topic: str):
    try:
        return read_topic(stack.kafka, topic)
    except KeyError:
        return None


# -- 2. to 4. missing privileges -------------------------------------------------------------

@pytest.mark.parametrize(
    "extra, statement",
    [
        ([], 'FOR TABLE "public"."items", "public"."secret"'),
        (["--tables", "items"], 'FOR TABLE "public"."items"'),
    ],
    ids=["all-tables", "tables"],
)
def test_a_role_that_may_not_create_the_publication_is_told_the_statement(
    stack, source, prefix, make_role, passwords, extra, statement
):
    role = make_role(select=("items", "secret"))
    proc = bottler("capture", "-d", role.dsn, "-s", prefix, *services(stack), *extra)
    assert_clear_error(
        proc, f"publication {prefix} does not exist", role.name,
        f'CREATE PUBLICATION "{prefix}" {statement};', f"--publication {prefix}", "owner",
        secrets=tuple(passwords),
    )
    assert scalar(source, "select count(*) from pg_publication") == 0


def test_a_publication_named_but_missing_is_not_created(
    stack, source, prefix, make_role, passwords
):
    role = make_role()
    proc = bottler("capture", "-d", role.dsn, "-s", prefix, *services(stack),
                   "--publication", "wanted")
    assert_clear_error(proc, "publication wanted does not exist in this database",
                       "--publication", secrets=tuple(passwords))
    assert scalar(source, "select count(*) from pg_publication") == 0


def test_a_role_without_replication_is_told_to_alter_it(
    stack, source, prefix, make_role, publication, passwords
):
    role = make_role(replication=False)
    proc = bottler("capture", "-d", role.dsn, "-s", prefix, "--publication", publication,
                   *services(stack))
    assert_clear_error(proc, f"role {role.name} may not use replication",
                       f'ALTER ROLE "{role.name}" REPLICATION;', secrets=tuple(passwords))


@pytest.mark.parametrize("missing", ["select", "schema-usage"])
def test_a_role_that_may_not_read_a_published_table_is_told_the_grant(
    stack, source, prefix, make_role, passwords, missing
):
    pub = f"pub_{prefix}"
    if missing == "select":
        role = make_role(select=("items",))
        execute(source, f"create publication {pub} for table items, secret")
        table, grant = "public.secret", 'GRANT SELECT ON "public"."secret" TO "{}";'
    else:
        execute(source, "create schema hidden", "create table hidden.t (id int primary key)")
        role = make_role(select=("items", "hidden.t"))
        execute(source, f"create publication {pub} for table items, hidden.t")
        table, grant = "hidden.t", 'GRANT USAGE ON SCHEMA "hidden" TO "{}";'
    proc = bottler("capture", "-d", role.dsn, "-s", prefix, "--publication", pub,
                   *services(stack))
    assert_clear_error(proc, f"role {role.name} may not read {table}", grant.format(role.name),
                       secrets=tuple(passwords))
    assert scalar(source, "select count(*) from pg_replication_slots where slot_name = %s",
                  prefix) == 0  # refused before anything was created


# -- 5. server settings: wal_level and friends, on a throwaway cluster ------------------------

@pytest.fixture(scope="module")
def cluster():
    """A PostgreSQL cluster of this module's own, whose settings the tests may break."""
    root = new_stack_dir()
    pg = PostgresCluster(root, free_port(), "Pw" + secrets.token_hex(10))
    try:
        pg.init()
        pg.start()
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(root, ignore_errors=True)


HBA_POSTGRES_ONLY = "host postgres all 127.0.0.1/32 scram-sha-256\n"


def configure(pg: PostgresCluster, auto_conf: str, hba: str | None = None) -> None:
    """Restart ``pg`` with ``auto_conf`` (overriding the cluster's own logical settings) and
    ``hba`` as pg_hba.conf (None: the one initdb wrote)."""
    pg.stop()
    (pg.data / "postgresql.auto.conf").write_text(auto_conf)
    path = pg.data / "pg_hba.conf"
    if not hasattr(pg, "initial_hba"):
        pg.initial_hba = path.read_text()
    path.write_text(hba or pg.initial_hba)
    pg.start()


@pytest.mark.parametrize(
    "auto_conf, hba, expected",
    [
        ("wal_level = replica\n", None,
         ("wal_level = replica", "ALTER SYSTEM SET wal_level = logical", "restart PostgreSQL")),
        ("max_wal_senders = 0\n", None,
         ("max_wal_senders = 0", "ALTER SYSTEM SET max_wal_senders", "restart PostgreSQL")),
        ("max_replication_slots = 0\n", None,
         ("max_replication_slots = 0", "ALTER SYSTEM SET max_replication_slots",
          "restart PostgreSQL")),
        ("", HBA_POSTGRES_ONLY,  # a logical replication connection needs the database's line
         ("cannot connect to PostgreSQL", 'no pg_hba.conf entry for host "127.0.0.1"',
          'database "other"')),
    ],
    ids=["wal_level", "max_wal_senders", "max_replication_slots", "pg_hba"],
)
def test_server_settings_that_prevent_capture_say_how_to_fix_them(
    stack, cluster, prefix, auto_conf, hba, expected
):
    cluster.create_databases(("other",))
    configure(cluster, auto_conf, hba)
    if auto_conf:
        name, value = auto_conf.strip().split(" = ")
        assert scalar(cluster.dsn(), f"show {name}") == value
    proc = bottler("capture", "-d", cluster.dsn("other"), "-s", prefix, "-p", prefix,
                   *services(stack))
    assert_clear_error(proc, *expected, secrets=(cluster.password, password_of(stack.pg_dsn)))


# -- 6. slot in use --------------------------------------------------------------------------

def test_a_slot_in_use_by_another_process_is_named_with_its_pid(
    stack, source, prefix, make_role, publication, passwords
):
    holder = psycopg2.connect(
        source, connection_factory=psycopg2.extras.LogicalReplicationConnection
    )
    try:
        cur = holder.cursor()
        cur.create_replication_slot(prefix, output_plugin="pgoutput")
        cur.start_replication(slot_name=prefix, decode=False,
                              options={"proto_version": "1", "publication_names": publication})
        pid = wait_for(lambda: scalar(
            source, "select active_pid from pg_replication_slots where slot_name = %s", prefix
        ), 10, "the slot to be active")
        role = make_role()
        proc = bottler("capture", "-d", role.dsn, "-s", prefix, "--publication", publication,
                       *services(stack))
        assert_clear_error(proc, f"replication slot {prefix} is in use", f"pid {pid}", "--slot",
                           secrets=tuple(passwords))
        drop = bottler("slot", "drop", "-d", role.dsn, "-s", prefix)
        assert_clear_error(drop, f"replication slot {prefix} is in use by process {pid}",
                           "stop the capture", secrets=tuple(passwords))
        assert scalar(source, "select active_pid from pg_replication_slots "
                      "where slot_name = %s", prefix) == pid
    finally:
        holder.close()


# -- 7. unreachable or refused database ------------------------------------------------------

@pytest.mark.parametrize("case", ["wrong-password", "wrong-password-keywords", "nothing-listens",
                                  "no-host-listens"])
def test_a_database_that_refuses_or_is_unreachable_shows_the_dsn_masked(
    stack, source, prefix, make_role, passwords, case
):
    role = make_role()
    info = conninfo_to_dict(source)
    wrong = "Wrong" + secrets.token_hex(8)
    if case == "wrong-password":
        dsn = dsn_of(source, role.name, wrong)
        expected = (f"postgresql://{role.name}:***@", "password authentication failed")
    elif case == "wrong-password-keywords":
        dsn = (f"host={info['host']} port={info['port']} dbname={info['dbname']} "
               f"user={role.name} password={wrong}")
        expected = ("password=***", "password authentication failed")
    elif case == "nothing-listens":
        port = free_port()
        dsn = f"postgresql://{role.name}:{role.password}@127.0.0.1:{port}/{info['dbname']}"
        expected = (f"postgresql://{role.name}:***@127.0.0.1:{port}/", "refused")
    else:  # a multi-host DSN (as for a standby taking over): every host is named
        one, two = free_port(), free_port()
        dsn = (f"host=127.0.0.1,127.0.0.1 port={one},{two} dbname={info['dbname']} "
               f"user={role.name} password={role.password}")
        expected = ("no host of the DSN answered", f"127.0.0.1:{one} (Connection refused)",
                    f"127.0.0.1:{two} (Connection refused)")
    started = time.monotonic()
    proc = bottler("capture", "-d", dsn, "-s", prefix, *services(stack))
    assert time.monotonic() - started < 30
    assert_clear_error(proc, "cannot connect to PostgreSQL", *expected,
                       secrets=(*passwords, wrong))
    # nothing was created: the database is the first thing the capture reaches
    assert scalar(source, "select count(*) from pg_replication_slots where slot_name = %s",
                  prefix) == 0
    assert scalar(source, "select count(*) from pg_publication where pubname = %s", prefix) == 0


# -- 8. unreachable broker and registry ------------------------------------------------------

def test_an_unreachable_broker_is_named_within_bounded_time(
    stack, source, prefix, make_role, publication, passwords
):
    role = make_role()
    kafka_secret = "Kafka" + secrets.token_hex(8)
    port = free_port()
    started = time.monotonic()
    proc = bottler(
        "capture", "-d", role.dsn, "-s", prefix, "--publication", publication,
        "-b", f"127.0.0.1:{port}", "-r", stack.registry_url,
        "-C", "security.protocol=sasl_plaintext", "-C", "sasl.mechanism=PLAIN",
        "-C", "sasl.username=capture", "-C", f"sasl.password={kafka_secret}",
    )
    assert time.monotonic() - started < 30
    assert_clear_error(proc, f"Kafka broker at 127.0.0.1:{port} is unreachable", "--broker",
                       secrets=(*passwords, kafka_secret))
    # librdkafka's own lines on stderr name the address, never the SASL password (checked
    # above); nothing was created on the database before the broker was found unreachable.
    assert f"127.0.0.1:{port}" in proc.stderr
    assert scalar(source, "select count(*) from pg_replication_slots where slot_name = %s",
                  prefix) == 0


def test_an_unreachable_registry_is_named_with_its_password_masked(
    stack, source, prefix, make_role, publication, passwords
):
    role = make_role()
    registry_secret = "Reg" + secrets.token_hex(8)
    port = free_port()
    started = time.monotonic()
    proc = bottler("capture", "-d", role.dsn, "-s", prefix, "--publication", publication,
                   "-b", stack.kafka, "-r", f"http://reader:{registry_secret}@127.0.0.1:{port}")
    assert time.monotonic() - started < 30
    assert_clear_error(proc, f"schema registry at http://reader:***@127.0.0.1:{port} is "
                       "unreachable", "--schema-registry",
                       secrets=(*passwords, registry_secret))


# -- other bad input -------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["unkeyed", "tables-not-published"])
def test_bad_input_about_tables_is_refused_clearly(
    stack, source, prefix, make_role, passwords, case
):
    pub = f"pub_{prefix}"
    if case == "unkeyed":
        execute(source, "create table log (at int, line text)",
                f"create publication {pub} for table items, log")
        role = make_role(select=("items", "log"))
        extra, expected = [], ("public.log", "--allow-unkeyed")
    else:
        execute(source, f"create publication {pub} for table items")
        role = make_role(select=("items", "secret"))
        extra = ["--tables", "items,secret"]
        expected = (f"publication {pub} does not publish: public.secret",
                    f'ALTER PUBLICATION "{pub}" ADD TABLE public.secret')
    proc = bottler("capture", "-d", role.dsn, "-s", prefix, "--publication", pub,
                   *services(stack), *extra)
    assert_clear_error(proc, *expected, secrets=tuple(passwords))


# -- 9. flags, config file, environment ------------------------------------------------------

@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--on-error", "maybe"], ("--on-error", "'exit' or 'log'", "got 'maybe'")),
        (["--output-format", "xml"], ("--output-format", "'avro' or 'json'", "got 'xml'")),
        (["--snapshot-workers", "0"], ("--snapshot-workers", "greater than or equal to 1")),
        (["--slot", "Bad-Name"], ("--slot", "lower-case letters", "got 'Bad-Name'")),
        (["-C", "novalue"], ("-C", "prop=value", "'novalue'")),
        (["-C", "no.such.property=1"], ("-C", "No such configuration property",
                                         '"no.such.property"')),
        (["-C", "linger.ms=soon"], ("-C", "Invalid value", "queue.buffering.max.ms")),
        # noida-db takes the topic; the registry's URLs cannot carry its subjects (a raw 404)
        (["--topic-prefix", "shop/eu"], ("--topic-prefix", "ASCII letters", "got 'shop/eu'")),
    ],
    ids=["on-error", "output-format", "snapshot-workers", "slot", "C-novalue", "C-unknown",
         "C-bad-value", "topic-prefix"],
)
def test_invalid_flag_values_fail_clearly(stack, source, prefix, make_role, publication,
                                          passwords, flags, expected):
    role = make_role()
    args = ["-d", role.dsn, "--publication", publication, *services(stack)]
    if "--slot" not in flags:
        args += ["-s", prefix]
    proc = bottler("capture", *args, *flags)
    assert_clear_error(proc, *expected, secrets=tuple(passwords))


def test_config_file_environment_and_flags_in_order_of_precedence(stack, tmp_path, passwords):
    """flags > BOTTLER_* environment > YAML config file > defaults. Which source won shows in the
    error: each DSN points at its own port where nothing listens."""
    ports = {name: free_port() for name in ("yaml", "env", "flag", "bare")}
    pw = "Pw" + secrets.token_hex(10)
    passwords.append(pw)

    def dsn(source: str) -> str:
        return f"postgresql://capture:{pw}@127.0.0.1:{ports[source]}/shop"

    config = tmp_path / "capture.yaml"
    config.write_text(f"postgres: {dsn('yaml')}\non_error: maybe\nslot: from_yaml\n")
    unreachable = ("cannot connect to PostgreSQL",)
    secret = tuple(passwords)

    # The file is read: its invalid on_error is reported...
    assert_clear_error(bottler("capture", "--config", str(config)),
                       "--on-error", "got 'maybe'", str(config), secrets=secret)
    # ...and a flag overrides it; the DSN then comes from the file.
    assert_clear_error(bottler("capture", "--config", str(config), "--on-error", "log"),
                       *unreachable, f"127.0.0.1:{ports['yaml']}", secrets=secret)
    # BOTTLER_* variables override the file; BOTTLER_CONFIG names the file.
    assert_clear_error(
        bottler("capture", env={"BOTTLER_CONFIG": str(config), "BOTTLER_ON_ERROR": "log",
                                "BOTTLER_PG_DSN": dsn("env")}),
        *unreachable, f"127.0.0.1:{ports['env']}", secrets=secret)
    assert_clear_error(
        bottler("capture", "--config", str(config), env={"BOTTLER_ON_ERROR": "exit"}),
        *unreachable, f"127.0.0.1:{ports['yaml']}", secrets=secret)
    # Flags override the environment.
    assert_clear_error(
        bottler("capture", "--config", str(config), "--on-error", "log", "-d", dsn("flag"),
                env={"BOTTLER_PG_DSN": dsn("env")}),
        *unreachable, f"127.0.0.1:{ports['flag']}", secrets=secret)
    # Unprefixed names are not settings: a stray POSTGRES or BROKER variable is ignored.
    assert_clear_error(
        bottler("capture", env={"POSTGRES": dsn("bare"), "BROKER": "127.0.0.1:1"}),
        "--postgres", "required", "BOTTLER_PG_DSN", secrets=secret)
    # A config file that is missing or not YAML is named.
    assert_clear_error(bottler("capture", "--config", str(tmp_path / "none.yaml")),
                       "config file", "not found", secrets=secret)
    config.write_text("postgres: [unclosed\n")
    assert_clear_error(bottler("capture", "--config", str(config)),
                       f"config file {config} is not valid YAML", secrets=secret)


# -- 10. slot status and drop ----------------------------------------------------------------

def test_slot_status_and_drop(stack, source, prefix, make_role, publication, passwords, caplog):
    role = make_role()
    capture = CaptureThread(postgres=role.dsn, slot=prefix, topic_prefix=prefix,
                            publication=publication, broker=stack.kafka,
                            schema_registry=stack.registry_url, skip_snapshot=True,
                            heartbeat_interval=0.5).start()
    try:
        wait_for(lambda: scalar(source, "select active_pid from pg_replication_slots "
                                "where slot_name = %s", prefix), 30, "the capture's slot")
        execute(source, "insert into items values (100, 'streamed')")
        wait_for(lambda: _messages(stack, f"{prefix}.items"), 30, "the streamed insert")
        pid = scalar(source, "select active_pid from pg_replication_slots where slot_name = %s",
                     prefix)
        refused = bottler("slot", "drop", "-d", role.dsn, "-s", prefix)
        assert_clear_error(refused, f"replication slot {prefix} is in use by process {pid}",
                           secrets=tuple(passwords))
    finally:
        capture.stop()
    for password in passwords:
        assert password not in caplog.text

    status = bottler("slot", "status", "-d", role.dsn, "-s", prefix)
    assert status.returncode == 0, status.stderr
    confirmed = scalar(source, "select confirmed_flush_lsn::text from pg_replication_slots "
                       "where slot_name = %s", prefix)
    assert confirmed and confirmed != "0/0"
    row = next(line for line in status.stdout.splitlines() if f" {prefix} " in line)
    cells = [c.strip() for c in row.strip("│ ").split("│")]
    assert cells[0] == prefix and cells[1] == "-"  # no capture holds it now
    assert cells[2] == confirmed
    for cell in cells[3:5]:  # retained WAL and lag, in bytes with a unit
        number, unit = cell.split()
        assert float(number) >= 0 and unit in ("B", "kB", "MB", "GB")
    for header in ("confirmed LSN", "retained WAL", "lag"):
        assert header in status.stdout
    assert not any(p in status.stdout + status.stderr for p in passwords)

    dropped = bottler("slot", "drop", "-d", role.dsn, "-s", prefix)
    assert dropped.returncode == 0, dropped.stderr
    assert f"dropped replication slot {prefix}" in dropped.stdout
    assert scalar(source, "select count(*) from pg_replication_slots where slot_name = %s",
                  prefix) == 0
    assert_clear_error(bottler("slot", "drop", "-d", role.dsn, "-s", prefix),
                       f"replication slot {prefix} does not exist", "bottler slot status",
                       secrets=tuple(passwords))
