"""The `bottler` command line."""

from __future__ import annotations

import atexit
import gc
import sys
import tomllib
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import Field
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from bottler.lazy import lazy_group
from bottler.retire import RetireSettings
from common import extras, options
from common.config import MetricsSettings, Settings, env
from common.errors import BottlerError
from common.flags import Flag
from common.logs import setup_logging
from common.options import settings_command
from common.redact import passwords_on_command_line, redact
from common.signals import stop_on_signals
from schemas.registry_server.settings import ServeSettings

# The commands of other rooms, imported when one of them runs (bottler/lazy.py); "@extra": the
# install's extra (pyproject.toml) the command checks first, so a missing one is one clear line.
app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__, cls=lazy_group({
    "capture": "capture.cli:capture_app",
    "slot": "capture.cli:slot_app",
    "reindex": "materializers.search.cli:reindex@search",
    "warehouse": "materializers.warehouse.cli:warehouse_app",
    "translate": "materializers.translators.cli:translate",
    "status": "bottler.status.cli:status",
    "migrate": "bottler.migrate.cli:migrate_app",
}))
stack_app = typer.Typer(no_args_is_help=True, help="The embedded stack of real services.")
registry_app = typer.Typer(no_args_is_help=True, help="The schema registry.")
demo_app = typer.Typer(no_args_is_help=True, help="The demo shop database.")
materialize_app = typer.Typer(no_args_is_help=True, help="Build views from the topics.",
                              cls=lazy_group({
    "postgres": "materializers.postgres.cli:materialize_postgres",
    "search": "materializers.search.cli:materialize_search@search",
    "warehouse": "materializers.warehouse.cli:materialize_warehouse@warehouse",
}))
app.add_typer(stack_app, name="stack")
app.add_typer(registry_app, name="registry")
app.add_typer(demo_app, name="demo")
app.add_typer(materialize_app, name="materialize")


@app.command("retire")
@settings_command
def retire_cmd(s: RetireSettings) -> None:
    """Remove a capture: its topics, registry subjects, search indices, replication slot,
    publications and the offsets views stored for its topics (after confirming)."""
    from bottler.retire import retire

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

STACK_DIR = Flag("--dir", help="Where the stack keeps its data")


def _port(name: str, default: int) -> Any:
    """A port of the stack: None (the one it last used, else ``default``) unless given."""
    field = Flag(f"--{name}-port", help=f"{name} port (or the port the stack last used)",
                 shown=str(default))
    return Annotated[int | None, field, Field(
        validation_alias=env(f"BOTTLER_STACK_{name.upper().replace('-', '_')}_PORT"))]


class StackSettings(Settings):
    """`bottler stack *`: the stack's directory."""

    dir: Annotated[Path, STACK_DIR] = Field(Path(".stack"),
                                             validation_alias=env("BOTTLER_STACK_DIR"))


class StackResetSettings(StackSettings):
    yes: Annotated[bool, Flag("--yes", help="Do not ask for confirmation.")] = False


class StackUpSettings(StackSettings):
    postgres_port: _port("postgres", 15432) = None
    kafka_port: _port("kafka", 19092) = None
    kafka_controller_port: _port("kafka-controller", 19093) = None
    registry_port: _port("registry", 18081) = None
    search_port: _port("search", 19200) = None
    metrics_port: _port("metrics", 19100) = None
    replica_metrics_port: _port("replica-metrics", 19101) = None
    search_metrics_port: _port("search-metrics", 19102) = None
    warehouse_metrics_port: _port("warehouse-metrics", 19103) = None
    translator_metrics_port: _port("translator-metrics", 19104) = None
    load_metrics_port: _port("load-metrics", 19105) = None
    pg_version: Annotated[str | None, Flag(
        "--pg-version", help="PostgreSQL major to run, 15 (Debian's), 16, 17 or 18 (PyPI's "
        "wheels, in the dev extra), when the stack's cluster is created; remembered",
        shown="18 where found, else the first server found")] = Field(
        None, validation_alias=env("BOTTLER_STACK_PG_VERSION"))
    app: Annotated[list[str], Flag(
        "--app", help="Also run this part of the appliance (capture, replica, search, "
        "warehouse, translator, load); remembered.")] = []
    all: Annotated[bool, Flag("--all", help="Run every part of the appliance.")] = False
    demo: Annotated[bool, Flag("--demo", help="Seed the demo shop (before the apps).")] = False
    instances: Annotated[list[str], Flag(
        "--instances", help="VIEW=N: run the replica, search or translator as N instances "
        "sharing the topics' partitions in one consumer group (replica, replica-2, …); "
        "repeatable; remembered", shown="1 each")] = []


def _stack(root: Path, ports: dict[str, int | None] | None = None,
           pg_version: str | None = None):
    from compose.postgres import default_version
    from compose.stack import Stack

    if pg_version is None and not (root / "stack.json").exists():  # a new stack
        pg_version = default_version()
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
@settings_command
def stack_up(s: StackUpSettings) -> None:
    """Start PostgreSQL, the broker (Apache Kafka), the search engine and the registry, and the
    apps; idempotent."""
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
@settings_command
def stack_down(s: StackSettings) -> None:
    """Stop every process the stack started (data is kept)."""
    stack = _stack(s.dir)
    outcome = stack.down()
    for name, what in outcome.items():
        out.print(f"{name}: {what}")


@stack_app.command("status")
@settings_command
def stack_status(s: StackSettings) -> None:
    """Show each service, its PID, restarts and endpoint. Exits 1 when something is not
    running (or waiting to be restarted)."""
    stack = _stack(s.dir)
    _print_stack(stack)
    restarting = any(s.state != "running" for s in stack.supervision().values())
    if restarting or not all(stack.status().values()):
        raise typer.Exit(1)


@stack_app.command("reset")
@settings_command
def stack_reset(s: StackResetSettings) -> None:
    """Stop the stack and delete all its data."""
    if not s.yes:
        typer.confirm(f"Delete {s.dir.resolve()} and all the stack's data?", abort=True)
    _stack(s.dir).reset()
    out.print(f"removed {s.dir}")


@registry_app.command("serve")
@settings_command
def registry_serve(s: ServeSettings) -> None:
    """Run the schema registry (Confluent REST API subset) in the foreground."""
    from schemas.registry_server.server import serve

    serve(s)


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
    postgres: Annotated[str, Flag("--postgres", "-d", help="The demo shop database")] = Field(
        validation_alias=env("BOTTLER_PG_DSN"))
    rate: Annotated[float, Flag("--rate", help="Transactions per second")] = Field(5.0, gt=0)
    duration: Annotated[float | None, Flag(
        "--duration", help="Seconds to run", shown="until stopped")] = Field(None, gt=0)


@demo_app.command("load")
@settings_command
def demo_load(s: LoadSettings) -> None:
    """A gentle write load on the demo shop: orders placed, paid, shipped, cancelled; prices
    changed; customers signing up (one business action per transaction)."""
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
    # The interpreter's last collections, as it exits, walk every object the command's libraries
    # made (Spark Connect's client, pandas, pyarrow: 0.25 s of a warehouse load's exit) to free
    # memory the process is about to give back whole: frozen, they pass them over
    atexit.register(gc.freeze)
    for warning in passwords_on_command_line(sys.argv[1:]):
        err.print(f"[yellow]warning:[/] {warning}", highlight=False)
    try:
        app(prog_name="bottler")
    except BottlerError as exc:
        # escaped: a message may hold brackets (pip install 'bottler-cdc[warehouse]')
        err.print(f"[bold red]error:[/] {escape(redact(str(exc)))}", highlight=False)
        sys.exit(2)
