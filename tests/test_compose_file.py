"""Static checks of the Docker users' stack: compose/docker-compose.yml, compose/Dockerfile,
compose/prometheus.yml, .dockerignore and docs/docker.md. No services are started: each app's
command line is parsed by the `bottler` command itself. The only optional test that runs a tool
needs a working Docker engine and skips without one."""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "compose" / "docker-compose.yml"
DOCS_FILE = ROOT / "docs" / "docker.md"
DOCKERIGNORE = ROOT / ".dockerignore"
PYPROJECT = ROOT / "pyproject.toml"

PROMETHEUS_FILE = ROOT / "compose" / "prometheus.yml"

def pinned_kafka() -> str:
    """The Kafka version the embedded stack's jars are pinned at (compose/jars/pom.xml)."""
    import re

    pom = (ROOT / "compose" / "jars" / "pom.xml").read_text()
    return re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)[1]


BACKING_IMAGES = {
    "postgres": "postgres:16",
    "kafka": f"apache/kafka:{pinned_kafka()}",  # the embedded stack's version
    "schema-registry": "confluentinc/cp-schema-registry:7.7.1",
    "elasticsearch": "docker.elastic.co/elasticsearch/elasticsearch:8.15.3",
}
EXPECTED_IMAGES = BACKING_IMAGES | {
    "prometheus": "prom/prometheus:v2.55.1",
    "grafana": "grafana/grafana:11.3.0",
}
# The appliance's long-running processes, from the bottler image, each with its command line
# (after the image's `bottler` entrypoint); every one serves its metrics on port 9100.
APPS = {
    "capture": ["capture", "--slot", "bottler"],
    "replica": ["materialize", "postgres"],
    "search": ["materialize", "search", "--index", "shop"],
    "warehouse": ["materialize", "warehouse", "--path", "/data/warehouse"],
    "translator": ["translate", "orders"],
}
METRICS_PORT = 9100
# Services of the bottler image: the CLI (`--help`), the demo seed, and the apps.
BOTTLER_IMAGE_SERVICES = {"bottler", "demo"} | set(APPS)
EXPECTED_SERVICES = set(EXPECTED_IMAGES) | BOTTLER_IMAGE_SERVICES
EXPECTED_HOST_PORTS = {
    "postgres": 5432,
    "kafka": 9092,
    "schema-registry": 8081,
    "elasticsearch": 9200,
    "prometheus": 9090,
    "grafana": 3000,
}
# Which service each BOTTLER_* variable of the bottler service must point at.
BOTTLER_TARGETS = {
    "BOTTLER_PG_DSN": "postgres",
    "BOTTLER_KAFKA": "kafka",
    "BOTTLER_REGISTRY": "schema-registry",
    "BOTTLER_SEARCH": "elasticsearch",
}
DEFAULT_URL_PORTS = {"postgresql": 5432, "postgres": 5432, "http": 80, "https": 443}


# --------------------------------------------------------------------------- helpers


def load_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict), "compose file must be a YAML mapping"
    return data


_VAR = re.compile(r"\$(?:(\$)|\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}|([A-Za-z_]\w*))")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose-style variable substitution: $$, $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}."""

    def sub(m: re.Match[str]) -> str:
        if m.group(1):
            return "$"
        name = m.group(2) or m.group(5)
        op, default = m.group(3), m.group(4)
        if op == ":-":
            return env.get(name) or default
        if op == "-":
            return env.get(name, default)
        if op in (":?", "?"):
            assert name in env, f"${{{name}}} is required but unset"
        return env.get(name, "")

    return _VAR.sub(sub, value)


def environment(service: dict[str, Any], env: dict[str, str] | None = None) -> dict[str, str]:
    raw = service.get("environment") or {}
    if isinstance(raw, list):
        pairs = dict(item.split("=", 1) if "=" in item else (item, "") for item in raw)
    else:
        pairs = {k: "" if v is None else str(v) for k, v in raw.items()}
    return {k: interpolate(v, env or {}) for k, v in pairs.items()}


def published_ports(service: dict[str, Any]) -> dict[int, int]:
    """host port -> container port for every published port of a service."""
    result: dict[int, int] = {}
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            if entry.get("published") is not None:
                result[int(entry["published"])] = int(entry["target"])
            continue
        text = str(entry).split("/", 1)[0]
        parts = text.rsplit(":", 2)
        assert all(p.isdigit() for p in parts[-2:]), f"unsupported port syntax {entry!r}"
        if len(parts) >= 2:
            result[int(parts[-2])] = int(parts[-1])
    return result


def postgres_settings(service: dict[str, Any]) -> dict[str, str]:
    """The `-c name=value` server settings of a postgres service's command."""
    command = service.get("command") or []
    if isinstance(command, str):
        command = command.split()
    settings: dict[str, str] = {}
    for i, arg in enumerate(command):
        if arg == "-c" and i + 1 < len(command):
            name, _, value = command[i + 1].partition("=")
            settings[name.strip()] = value.strip()
        elif arg.startswith("--") and "=" in arg:
            name, _, value = arg[2:].partition("=")
            settings[name.replace("-", "_")] = value
    return settings


def kafka_listeners(value: str) -> dict[str, tuple[str, int]]:
    """'NAME://host:port,...' -> {NAME: (host, port)}."""
    listeners: dict[str, tuple[str, int]] = {}
    for item in filter(None, (s.strip() for s in value.split(","))):
        name, sep, address = item.partition("://")
        assert sep, f"listener {item!r} has no name://"
        host, _, port = address.rpartition(":")
        listeners[name] = (host, int(port))
    return listeners


def listen_ports(name: str, service: dict[str, Any]) -> set[int]:
    """Ports a service listens on inside the compose network, as declared in the file."""
    ports = set(published_ports(service).values())
    ports |= {int(str(p).split("/")[0]) for p in service.get("expose") or []}
    env = environment(service)
    if name == "postgres":
        ports = {int(postgres_settings(service).get("port", 5432))}
    if "KAFKA_LISTENERS" in env:
        controllers = set(env.get("KAFKA_CONTROLLER_LISTENER_NAMES", "").split(","))
        ports |= {
            port
            for lname, (_, port) in kafka_listeners(env["KAFKA_LISTENERS"]).items()
            if lname not in controllers
        }
    if "SCHEMA_REGISTRY_LISTENERS" in env:
        for url in env["SCHEMA_REGISTRY_LISTENERS"].split(","):
            ports.add(url_port(urlsplit(url.strip())))
    return ports


def url_port(parts: SplitResult) -> int:
    if parts.port is not None:
        return parts.port
    assert parts.scheme in DEFAULT_URL_PORTS, f"no port and unknown scheme in {parts.geturl()}"
    return DEFAULT_URL_PORTS[parts.scheme]


def split_address(value: str) -> list[SplitResult]:
    """A URL/DSN, or a comma-separated host:port list, as SplitResults."""
    if "://" in value:
        return [urlsplit(value)]
    return [urlsplit("//" + item.strip()) for item in value.split(",") if item.strip()]


def depends_on(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    raw = service.get("depends_on") or {}
    if isinstance(raw, list):
        return {name: {"condition": "service_started"} for name in raw}
    return {name: (spec or {"condition": "service_started"}) for name, spec in raw.items()}


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    assert not pending, "Dockerfile ends inside a line continuation"
    return instructions


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list), f"expected JSON exec form, got {args!r}"
    return value


def build_paths(compose: dict[str, Any]) -> tuple[Path, Path]:
    build = compose["services"]["bottler"]["build"]
    if isinstance(build, str):
        build = {"context": build}
    context = (COMPOSE_FILE.parent / build["context"]).resolve()
    dockerfile = (context / build.get("dockerfile", "Dockerfile")).resolve()
    return context, dockerfile


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Every pipe table in a markdown text as rows of cells, header first, separator dropped."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in text.splitlines() + [""]:
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|"):
            cells = [c.strip() for c in stripped[1:-1].split("|")]
            if not all(re.fullmatch(r":?-{3,}:?", c) for c in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def unquote(cell: str) -> str:
    return cell.replace("`", "").strip()


def docs_service_table() -> list[dict[str, str]]:
    for table in markdown_tables(DOCS_FILE.read_text()):
        header = [unquote(c).lower() for c in table[0]]
        if "service" in header and "image" in header and "host port" in header:
            return [dict(zip(header, row, strict=True)) for row in table[1:]]
    raise AssertionError("docs/docker.md has no table with service, image and host port columns")


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_compose()


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


# --------------------------------------------------------------------------- compose file


def test_compose_parses_without_version_key_and_has_project_name(compose: dict[str, Any]) -> None:
    assert "version" not in compose, "the compose spec has no top-level version key"
    assert compose.get("name") == "bottler"
    assert isinstance(compose.get("services"), dict)


def test_every_expected_service_is_present_with_its_image(services: dict[str, Any]) -> None:
    assert set(services) == EXPECTED_SERVICES
    for name, image in EXPECTED_IMAGES.items():
        assert services[name].get("image") == image, name
    assert "build" in services["bottler"]


@pytest.mark.parametrize("name", sorted(EXPECTED_HOST_PORTS))
def test_published_host_ports(services: dict[str, Any], name: str) -> None:
    ports = published_ports(services[name])
    assert EXPECTED_HOST_PORTS[name] in ports, f"{name} publishes {sorted(ports)}"
    assert ports[EXPECTED_HOST_PORTS[name]] in listen_ports(name, services[name])


def test_no_two_services_publish_the_same_host_port(services: dict[str, Any]) -> None:
    seen: dict[int, str] = {}
    for name, service in services.items():
        for host_port in published_ports(service):
            assert host_port not in seen, f"{name} and {seen[host_port]} both publish {host_port}"
            seen[host_port] = name


def test_every_variable_reference_has_a_default() -> None:
    text = COMPOSE_FILE.read_text()
    refs = re.findall(r"(?<!\$)\$\{([^}]*)\}", text)
    assert refs, "expected ${POSTGRES_PASSWORD:-...} references"
    for ref in refs:
        assert ":-" in ref, f"${{{ref}}} has no default; `up` without a .env would blank it"


def test_postgres_is_configured_for_logical_decoding(services: dict[str, Any]) -> None:
    pg = services["postgres"]
    settings = postgres_settings(pg)
    assert settings.get("wal_level") == "logical"
    assert int(settings.get("max_replication_slots", 0)) >= 20
    assert int(settings.get("max_wal_senders", 0)) >= 20
    env = environment(pg)
    assert env["POSTGRES_USER"] == "postgres"
    assert env["POSTGRES_DB"] == "shop"
    assert env["POSTGRES_PASSWORD"] == "bottler"
    assert environment(pg, {"POSTGRES_PASSWORD": "s3cret"})["POSTGRES_PASSWORD"] == "s3cret"
    assert "pg_isready" in json.dumps(pg["healthcheck"]["test"])


def test_kafka_is_kraft_without_zookeeper(services: dict[str, Any]) -> None:
    for name, service in services.items():
        assert "zookeeper" not in name.lower()
        assert "zookeeper" not in str(service.get("image", "")).lower()
    env = environment(services["kafka"])
    assert not any("ZOOKEEPER" in key for key in env)
    assert set(env["KAFKA_PROCESS_ROLES"].split(",")) == {"broker", "controller"}
    node_id = env["KAFKA_NODE_ID"]
    listeners = kafka_listeners(env["KAFKA_LISTENERS"])
    controller = env["KAFKA_CONTROLLER_LISTENER_NAMES"]
    assert controller in listeners
    voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"].split(",")
    assert voters == [f"{node_id}@kafka:{listeners[controller][1]}"]
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] in listeners
    protocol_map = dict(
        p.split(":") for p in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    )
    assert set(listeners) <= set(protocol_map)
    for key in (
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR",
    ):
        assert env[key] == "1", key


def test_kafka_advertises_the_host_and_the_network_listeners(services: dict[str, Any]) -> None:
    env = environment(services["kafka"])
    listeners = kafka_listeners(env["KAFKA_LISTENERS"])
    advertised = kafka_listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    assert set(advertised) <= set(listeners)
    for name, (_host, port) in advertised.items():
        assert listeners[name][1] == port, f"{name} advertises a port it does not bind"
    host_port = EXPECTED_HOST_PORTS["kafka"]
    container_port = published_ports(services["kafka"])[host_port]
    assert ("localhost", container_port) in advertised.values()
    assert any(host == "kafka" for host, _ in advertised.values())


def assert_points_at(services: dict[str, Any], value: str, target: str) -> None:
    """Every address in value has host == target (a service) and a port target listens on."""
    parts = split_address(value)
    assert parts, f"no address in {value!r}"
    for part in parts:
        assert part.hostname in services, f"{part.hostname!r} is not a service"
        assert part.hostname == target
        port = url_port(part)
        assert port in listen_ports(target, services[target]), f"{target} does not listen on {port}"
        if target == "kafka":
            # Clients bootstrap and then use the advertised address: it must be this one.
            kenv = environment(services["kafka"])
            advertised = kafka_listeners(kenv["KAFKA_ADVERTISED_LISTENERS"]).values()
            assert (part.hostname, port) in advertised


@pytest.mark.parametrize("variable", sorted(BOTTLER_TARGETS))
@pytest.mark.parametrize("name", sorted(BOTTLER_IMAGE_SERVICES))
def test_bottler_variables_point_at_services_in_this_file(
    services: dict[str, Any], variable: str, name: str
) -> None:
    env = environment(services[name])
    assert variable in env
    assert_points_at(services, env[variable], BOTTLER_TARGETS[variable])


# BOTTLER_* variables that only some services have, beside the four every one gets.
EXTRA_VARIABLES = {"replica": {"BOTTLER_TARGET_DSN", "BOTTLER_JOIN_GROUP"},
                   "search": {"BOTTLER_JOIN_GROUP"}, "warehouse": {"BOTTLER_WAREHOUSE_PATH"}}


def test_the_views_scale_out_in_one_consumer_group(services: dict[str, Any]) -> None:
    for name, variable in (("replica", "REPLICA_INSTANCES"), ("search", "SEARCH_INSTANCES")):
        assert environment(services[name])["BOTTLER_JOIN_GROUP"] == "true"
        assert services[name]["deploy"]["replicas"] == f"${{{variable}:-1}}"
        assert "container_name" not in services[name]  # a fixed name cannot be scaled


@pytest.mark.parametrize("name", sorted(BOTTLER_IMAGE_SERVICES))
def test_bottler_environment_names_only_known_variables(
    services: dict[str, Any], name: str
) -> None:
    env = environment(services[name])
    bottler_vars = {k for k in env if k.startswith("BOTTLER_")}
    assert bottler_vars == set(BOTTLER_TARGETS) | EXTRA_VARIABLES.get(name, set())


@pytest.mark.parametrize("password", [None, "s3cret"])
def test_bottler_dsn_matches_the_postgres_service(
    services: dict[str, Any], password: str | None
) -> None:
    env_in = {} if password is None else {"POSTGRES_PASSWORD": password}
    pg_env = environment(services["postgres"], env_in)
    dsn = urlsplit(environment(services["bottler"], env_in)["BOTTLER_PG_DSN"])
    assert dsn.scheme in ("postgresql", "postgres")
    assert dsn.username == pg_env["POSTGRES_USER"]
    assert dsn.password == pg_env["POSTGRES_PASSWORD"]
    assert dsn.path.lstrip("/") == pg_env["POSTGRES_DB"]


def test_schema_registry_uses_the_network_kafka_listener(services: dict[str, Any]) -> None:
    env = environment(services["schema-registry"])
    assert env["SCHEMA_REGISTRY_HOST_NAME"]
    listener = urlsplit(env["SCHEMA_REGISTRY_LISTENERS"])
    assert listener.hostname == "0.0.0.0"
    bootstrap = env["SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS"].removeprefix("PLAINTEXT://")
    assert_points_at(services, bootstrap, "kafka")
    assert depends_on(services["schema-registry"])["kafka"]["condition"] == "service_healthy"


def test_elasticsearch_is_a_single_node_without_security(services: dict[str, Any]) -> None:
    env = environment(services["elasticsearch"])
    assert env["discovery.type"] == "single-node"
    assert env["xpack.security.enabled"].lower() == "false"
    assert "-Xms1g" in env["ES_JAVA_OPTS"].split()
    assert "-Xmx1g" in env["ES_JAVA_OPTS"].split()


def test_every_depends_on_names_a_defined_service(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for dep, spec in depends_on(service).items():
            assert dep in services, f"{name} depends on undefined service {dep!r}"
            assert dep != name
            if spec.get("condition") == "service_healthy":
                check = services[dep].get("healthcheck") or {}
                assert check.get("test") and not check.get("disable"), f"{dep} has no healthcheck"


@pytest.mark.parametrize("name", sorted(BOTTLER_IMAGE_SERVICES))
def test_bottler_waits_for_every_backing_service_to_be_healthy(
    services: dict[str, Any], name: str
) -> None:
    deps = depends_on(services[name])
    for target in BOTTLER_TARGETS.values():
        assert deps.get(target, {}).get("condition") == "service_healthy", target


@pytest.mark.parametrize("name", sorted(BACKING_IMAGES))
def test_backing_services_have_healthchecks(services: dict[str, Any], name: str) -> None:
    test = services[name].get("healthcheck", {}).get("test")
    assert isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL"), name
    assert len(test) >= 2


def test_named_volumes_are_declared(compose: dict[str, Any], services: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    used: dict[str, set[str]] = {}
    for name, service in services.items():
        for volume in service.get("volumes") or []:
            source = volume.get("source") if isinstance(volume, dict) else volume.split(":")[0]
            if source and not source.startswith((".", "/", "~", "$")):
                used.setdefault(name, set()).add(source)
    assert set().union(*used.values()) <= declared
    assert "postgres" in used and "elasticsearch" in used


# --------------------------------------------------------------------------- the appliance


def command_line(service: dict[str, Any]) -> list[str]:
    command = service.get("command")
    if isinstance(command, str):
        command = command.split()
    assert isinstance(command, list) and command, "no command"
    return [str(arg) for arg in command]


def parse_bottler(service: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """Parse a service's `bottler` command line as the command itself does, in the service's
    environment, without running it: the subcommand path and its parameters. Unknown commands,
    unknown options and missing required ones fail here."""
    import os
    from unittest.mock import patch

    import typer

    from bottler.cli import app

    command = typer.main.get_command(app)
    args = command_line(service)
    path: list[str] = []
    rest = list(args)
    # down to the command, or to a group that runs itself (`capture` beside `capture snapshot`)
    while getattr(command, "commands", None) is not None and not (
            getattr(command, "invoke_without_command", False)
            and not (rest and rest[0] in command.commands)):
        assert rest, f"`bottler {' '.join(args)}` names no command"
        name = rest.pop(0)
        assert name in command.commands, f"`bottler {' '.join(path + [name])}` does not exist"
        command = command.commands[name]
        path.append(name)
    with patch.dict(os.environ, environment(service), clear=True):
        context = command.make_context(" ".join(["bottler", *path]), rest)
    return path, context.params


def test_bottler_image_services_share_the_built_image(services: dict[str, Any]) -> None:
    image = services["bottler"]["image"]
    for name in BOTTLER_IMAGE_SERVICES:
        assert services[name]["image"] == image, name
        assert services[name].get("build") == services["bottler"]["build"], name


@pytest.mark.parametrize("name", sorted(APPS))
def test_app_runs_its_bottler_command_with_metrics(services: dict[str, Any], name: str) -> None:
    args = command_line(services[name])
    assert args[0] != "bottler", "the ENTRYPOINT already is bottler"
    assert args[: len(APPS[name])] == APPS[name]
    _, params = parse_bottler(services[name])
    assert params["metrics_port"] == METRICS_PORT
    assert params["metrics_host"] == "0.0.0.0", "Prometheus scrapes it from another container"
    assert services[name].get("restart") in ("unless-stopped", "always", "on-failure"), (
        "an app that exits (its broker gone) must be restarted: it resumes where it stopped")
    healthcheck = json.dumps(services[name]["healthcheck"]["test"])
    assert f"127.0.0.1:{METRICS_PORT}/metrics" in healthcheck
    assert not published_ports(services[name]), "metrics stay inside the compose network"


def test_prometheus_scrapes_every_app_by_its_service_name(services: dict[str, Any]) -> None:
    config = yaml.safe_load(PROMETHEUS_FILE.read_text())
    targets: dict[str, str] = {}
    for job in config["scrape_configs"]:
        for group in job["static_configs"]:
            for target in group["targets"]:
                targets[target] = group["labels"]["app"]
    assert targets == {f"{app}:{METRICS_PORT}": app for app in APPS}
    mounts = services["prometheus"]["volumes"]
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts
    assert "--config.file=/etc/prometheus/prometheus.yml" in command_line(services["prometheus"])


def test_grafana_provisions_the_compose_prometheus_and_the_dashboard(
    services: dict[str, Any],
) -> None:
    grafana = services["grafana"]
    mounts = {}
    for volume in grafana["volumes"]:
        source, target = volume.split(":")[:2]
        assert (COMPOSE_FILE.parent / source).exists(), source
        mounts[target] = COMPOSE_FILE.parent / source
    provisioning = mounts["/etc/grafana/provisioning"]
    datasource = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    url = urlsplit(datasource["datasources"][0]["url"])
    assert url.hostname == "prometheus" and url.port in listen_ports("prometheus",
                                                                      services["prometheus"])
    dashboards = yaml.safe_load((provisioning / "dashboards" / "bottler.yml").read_text())
    folder = dashboards["providers"][0]["options"]["path"]
    assert f"{folder}/bottler-dashboard.json" in mounts
    json.loads(mounts[f"{folder}/bottler-dashboard.json"].read_text())
    assert "prometheus" in depends_on(grafana)


def test_replica_writes_into_the_database_the_init_script_creates(
    services: dict[str, Any],
) -> None:
    target = urlsplit(environment(services["replica"])["BOTTLER_TARGET_DSN"])
    source = urlsplit(environment(services["replica"])["BOTTLER_PG_DSN"])
    assert (target.hostname, target.port, target.username) == (
        source.hostname, source.port, source.username)
    database = target.path.lstrip("/")
    assert database != source.path.lstrip("/"), "the replica must not write into the source"
    initdb = [v.split(":") for v in services["postgres"]["volumes"]
              if ":/docker-entrypoint-initdb.d" in v]
    assert initdb, "postgres mounts no init scripts"
    scripts = " ".join(p.read_text() for p in (COMPOSE_FILE.parent / initdb[0][0]).glob("*.sql"))
    assert re.search(rf"create\s+database\s+{database}\b", scripts, re.IGNORECASE)


def test_warehouse_writes_to_a_named_volume(services: dict[str, Any]) -> None:
    _, params = parse_bottler(services["warehouse"])
    mounts = dict(v.split(":")[1::-1] for v in services["warehouse"]["volumes"])
    assert str(params["path"]) in mounts
    assert not mounts[str(params["path"])].startswith((".", "/")), "a named volume"


# The services that run once and exit 0: a restart policy would run them again and again.
ONE_SHOT = {"bottler", "demo"}


@pytest.mark.parametrize("name", sorted(EXPECTED_SERVICES))
def test_every_long_running_service_is_restarted_and_no_one_shot_is(
    services: dict[str, Any], name: str
) -> None:
    policy = services[name].get("restart")
    if name in ONE_SHOT:
        assert policy in (None, "no", "on-failure"), f"{name} exits 0 by design: {policy}"
    else:
        assert policy in ("unless-stopped", "always", "on-failure"), (
            f"{name} stops the appliance if it exits and stays down (restart: {policy})")


def test_capture_starts_after_the_demo_seed(services: dict[str, Any]) -> None:
    path, _ = parse_bottler(services["demo"])
    assert path == ["demo", "seed"]
    deps = depends_on(services["capture"])
    assert deps["demo"]["condition"] == "service_completed_successfully"
    assert "restart" not in services["demo"], "the seed runs once"


# --------------------------------------------------------------------------- Dockerfile


def test_dockerfile_path_exists_and_context_is_repo_root(compose: dict[str, Any]) -> None:
    context, dockerfile = build_paths(compose)
    assert context == ROOT
    assert dockerfile.is_file(), f"{dockerfile} does not exist"
    assert dockerfile == ROOT / "compose" / "Dockerfile"


def test_dockerfile_entrypoint_is_bottler(compose: dict[str, Any]) -> None:
    _, dockerfile = build_paths(compose)
    instructions = dockerfile_instructions(dockerfile)
    entrypoints = [args for kw, args in instructions if kw == "ENTRYPOINT"]
    assert entrypoints, "no ENTRYPOINT"
    assert exec_form(entrypoints[-1]) == ["bottler"]
    scripts = tomllib.loads(PYPROJECT.read_text())["project"]["scripts"]
    assert "bottler" in scripts, "the ENTRYPOINT needs the `bottler` console script"


def test_dockerfile_base_java_client_and_non_root_user(compose: dict[str, Any]) -> None:
    _, dockerfile = build_paths(compose)
    instructions = dockerfile_instructions(dockerfile)
    froms = [args for kw, args in instructions if kw == "FROM"]
    assert froms and froms[0].split()[0] == "python:3.11-slim-bookworm"
    runs = " ".join(args for kw, args in instructions if kw == "RUN")
    assert "openjdk-17-jre-headless" in runs
    assert "postgresql-client" in runs
    assert re.search(r"pip install --no-cache-dir '?\.[\[' ]", runs), runs
    users = [args for kw, args in instructions if kw == "USER"]
    assert users and users[-1].split(":")[0] not in ("root", "0")


def command_extra(service: dict[str, Any]) -> str | None:
    """The install's extra a service's `bottler` command needs (common/extras.needs marks it)."""
    import typer

    from bottler.cli import app

    command = typer.main.get_command(app)
    args = command_line(service)
    while getattr(command, "commands", None) and args and args[0] in command.commands:
        command = command.commands[args.pop(0)]
    callback = command.callback
    while callback is not None and not hasattr(callback, "extra"):
        callback = getattr(callback, "__wrapped__", None)
    return getattr(callback, "extra", None)


def test_the_image_installs_the_extras_its_services_need(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    _, dockerfile = build_paths(compose)
    runs = " ".join(args for kw, args in dockerfile_instructions(dockerfile) if kw == "RUN")
    installs = re.findall(r"pip install --no-cache-dir '?\.(?:\[([a-z,]*)\])?'?", runs)
    assert len(installs) == 1, runs
    installed = set(filter(None, installs[0].split(",")))
    needed = {name: command_extra(services[name]) for name in BOTTLER_IMAGE_SERVICES}
    assert needed["warehouse"] == "warehouse" and needed["search"] == "search"
    assert needed["capture"] is None and needed["replica"] is None, "the core install"
    assert set(filter(None, needed.values())) == installed, (
        f"the image installs {sorted(installed)}; its services need {needed}")
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert installed <= set(extras)


def test_dockerfile_copies_every_package_and_its_sources_exist(compose: dict[str, Any]) -> None:
    context, dockerfile = build_paths(compose)
    copied: set[str] = set()
    for kw, args in dockerfile_instructions(dockerfile):
        if kw not in ("COPY", "ADD"):
            continue
        words = [w for w in args.split() if not w.startswith("--")]
        assert "--from" not in args, "unexpected multi-stage COPY"
        for source in words[:-1]:
            copied.add(source.rstrip("/"))
            assert (context / source).exists(), f"COPY source {source} missing from the context"
    pyproject = tomllib.loads(PYPROJECT.read_text())
    includes = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {pattern.rstrip("*").rstrip(".") for pattern in includes}
    assert packages == {"bottler", "common", "capture", "schemas", "materializers", "compose"}
    assert packages <= copied, f"not copied: {sorted(packages - copied)}"
    assert {"pyproject.toml", pyproject["project"]["readme"]} <= copied


def test_dockerignore_excludes_local_state_but_no_copied_source(compose: dict[str, Any]) -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    normalized = {p.removeprefix("**/").rstrip("/") for p in patterns}
    required = {".venv", ".stack", ".git", "__pycache__", "*.pyc", ".pytest_cache", ".ruff_cache"}
    assert required <= normalized, f"missing: {sorted(required - normalized)}"
    _, dockerfile = build_paths(compose)
    for kw, args in dockerfile_instructions(dockerfile):
        if kw == "COPY":
            for source in args.split()[:-1]:
                for pattern in patterns:
                    assert not fnmatch.fnmatch(source.rstrip("/"), pattern.lstrip("!")), (
                        f"{source} is copied but excluded by .dockerignore {pattern}"
                    )


def test_bottler_command_runs_help_through_the_entrypoint(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    _, dockerfile = build_paths(compose)
    entrypoint = [
        exec_form(a) for kw, a in dockerfile_instructions(dockerfile) if kw == "ENTRYPOINT"
    ]
    command = services["bottler"].get("command")
    if isinstance(command, str):
        command = command.split()
    assert isinstance(command, list) and command
    assert command[0] != "bottler", "the ENTRYPOINT already is bottler: this would run it twice"
    assert entrypoint[-1] + command == ["bottler", "--help"]


# --------------------------------------------------------------------------- docs


def test_docs_show_the_up_command() -> None:
    text = DOCS_FILE.read_text()
    assert "docker compose -f compose/docker-compose.yml up -d" in text
    assert COMPOSE_FILE.relative_to(ROOT).as_posix() == "compose/docker-compose.yml"


def test_docs_table_agrees_with_the_compose_file(services: dict[str, Any]) -> None:
    rows = docs_service_table()
    by_service = {unquote(row["service"]): row for row in rows}
    assert set(by_service) == set(services), "the docs table must list every service once"
    assert len(rows) == len(by_service)
    bottler_env = environment(services["bottler"])
    for name, row in by_service.items():
        service = services[name]
        image = unquote(row["image"])
        if "image" in service and "build" not in service:
            assert image == service["image"], name
        else:
            assert "compose/Dockerfile" in image, name
        host_ports = sorted(published_ports(service))
        cell = unquote(row["host port"])
        if host_ports:
            assert [int(p) for p in re.findall(r"\d+", cell)] == host_ports, name
        else:
            assert not re.search(r"\d", cell), f"{name} publishes no port but the docs give {cell}"
        variable = unquote(row["variable"])
        if name in BOTTLER_TARGETS.values():
            assert variable in bottler_env, name
            assert BOTTLER_TARGETS[variable] == name
            network = unquote(row["inside the compose network"])
            addr = split_address(bottler_env[variable])[0]
            assert network == f"{addr.hostname}:{url_port(addr)}", name


def test_docs_embedded_stack_column_uses_other_ports(services: dict[str, Any]) -> None:
    docker_ports = {p for service in services.values() for p in published_ports(service)}
    embedded = {
        unquote(row["service"]): unquote(row["embedded stack (make up)"])
        for row in docs_service_table()
    }
    expected = {
        "postgres": 15432,
        "kafka": 19092,
        "schema-registry": 18081,
        "elasticsearch": 19200,
    }
    for name, port in expected.items():
        assert url_port(split_address(embedded[name])[0]) == port, name
        assert port not in docker_ports


def test_docs_host_exports_use_the_published_ports(services: dict[str, Any]) -> None:
    exports = dict(
        re.findall(r"^export (BOTTLER_[A-Z_]+)=(\S+)$", DOCS_FILE.read_text(), re.MULTILINE)
    )
    assert set(exports) == set(BOTTLER_TARGETS)
    pg_env = environment(services["postgres"])
    for variable, value in exports.items():
        target = BOTTLER_TARGETS[variable]
        (addr,) = split_address(value)
        assert addr.hostname in ("localhost", "127.0.0.1"), variable
        assert url_port(addr) in published_ports(services[target]), variable
        if target == "kafka":
            advertised = kafka_listeners(
                environment(services["kafka"])["KAFKA_ADVERTISED_LISTENERS"]
            ).values()
            assert (addr.hostname, url_port(addr)) in advertised
        if target == "postgres":
            assert addr.username == pg_env["POSTGRES_USER"]
            assert addr.password == pg_env["POSTGRES_PASSWORD"]
            assert addr.path.lstrip("/") == pg_env["POSTGRES_DB"]


# --------------------------------------------------------------------------- optional


def _docker_compose_usable() -> bool:
    if shutil.which("docker") is None:
        return False
    for args in (["docker", "info"], ["docker", "compose", "version"]):
        try:
            done = subprocess.run(args, capture_output=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return False
        if done.returncode != 0:
            return False
    return True


def test_docker_compose_config_accepts_the_file() -> None:
    if not _docker_compose_usable():
        pytest.skip("no working Docker engine with the compose plugin")
    done = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE_FILE), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_dockerfile_carries_delta_spark_and_the_kafka_connector(compose: dict[str, Any]) -> None:
    """The warehouse's cluster route is in the image: delta-spark and Spark's Kafka connector
    fetched at build through Spark's resolver, their jars, of the versions the warehouse extra
    installed, put on pyspark's classpath."""
    _, dockerfile = build_paths(compose)
    instructions = dockerfile_instructions(dockerfile)
    runs = " ".join(args for kw, args in instructions if kw == "RUN")
    assert "'.[search,warehouse]'" in runs  # delta-spark and pyspark come with the extra
    assert "m.version(\"delta-spark\")" in runs and "pyspark.__version__" in runs
    assert ("ARG", "DELTA_ARTIFACT=delta-spark_2.13") in instructions
    assert "spark.jars.packages" in runs
    assert "io.delta:${DELTA_ARTIFACT}:${DELTA_VERSION}" in runs
    assert "org.apache.spark:spark-sql-kafka-0-10_2.13:${SPARK_VERSION}" in runs
    assert re.search(r"cp /tmp/ivy/jars/\*\.jar .*pyspark", runs), "jars not on the classpath"
