"""The `bottler` command line."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from bottler.migrate.cli import migrate_app
from bottler.status.cli import status
from bottler.status.view import restarts_line
from bottler.status.watch import supervised
from capture import cli as capture_cli
from common import options
from common.errors import BottlerError
from common.logs import setup_logging
from common.redact import passwords_on_command_line, redact
from common.signals import stop_on_signals
from materializers.postgres.cli import materialize_postgres
from materializers.search.cli import materialize_search, reindex
from materializers.translators.cli import translate
from materializers.warehouse.cli import materialize_warehouse, warehouse_app

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
stack_app = typer.Typer(no_args_is_help=True, help="The embedded stack of real services.")
registry_app = typer.Typer(no_args_is_help=True, help="The schema registry.")
demo_app = typer.Typer(no_args_is_help=True, help="The demo shop database.")
app.add_typer(stack_app, name="stack")
app.add_typer(registry_app, name="registry")
app.add_typer(demo_app, name="demo")
app.command("capture")(capture_cli.capture)
app.add_typer(capture_cli.slot_app, name="slot")
materialize_app = typer.Typer(no_args_is_help=True, help="Build views from the topics.")
materialize_app.command("postgres")(materialize_postgres)
materialize_app.command("search")(materialize_search)
materialize_app.command("warehouse")(materialize_warehouse)
app.add_typer(materialize_app, name="materialize")
app.command("reindex")(reindex)
app.add_typer(warehouse_app, name="warehouse")
app.command("translate")(translate)
app.command("status")(status)
app.add_typer(migrate_app, name="migrate")

# Piped output (make, logs) is not squeezed into rich's default 80 columns.
out = Console() if sys.stdout.isatty() else Console(width=120)
err = Console(stderr=True, soft_wrap=True)  # an error stays on one greppable line

StackDir = typer.Option(
    Path(".stack"), "--dir", envvar="BOTTLER_STACK_DIR", help="Where the stack keeps its data."
)


def _port(name: str, default: int):
    return typer.Option(
        None, f"--{name}-port", envvar=f"BOTTLER_STACK_{name.upper().replace('-', '_')}_PORT",
        help=f"{name} port (default {default}, or the port the stack last used).",
        show_default=False,
    )


def _stack(root: Path, ports: dict[str, int | None] | None = None):
    from compose.stack import Stack

    return Stack(root, ports)


def _print_stack(stack, outcome: dict[str, str] | None = None) -> None:
    ep = stack.endpoints
    apis = [  # (api, the service that serves it, endpoint)
        ("postgres", "postgres", ep.pg_dsn),
        ("kafka", "broker", ep.kafka),
        ("search", "broker", ep.search),
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
    root: Path = StackDir,
    postgres_port: int | None = _port("postgres", 15432),
    kafka_port: int | None = _port("kafka", 19092),
    registry_port: int | None = _port("registry", 18081),
    search_port: int | None = _port("search", 19200),
    metrics_port: int | None = _port("metrics", 19100),
    replica_metrics_port: int | None = _port("replica-metrics", 19101),
    search_metrics_port: int | None = _port("search-metrics", 19102),
    warehouse_metrics_port: int | None = _port("warehouse-metrics", 19103),
    translator_metrics_port: int | None = _port("translator-metrics", 19104),
    load_metrics_port: int | None = _port("load-metrics", 19105),
    apps: list[str] | None = typer.Option(
        None, "--app", help="Also run this part of the appliance (capture, replica, search, "
        "warehouse, translator, load); remembered."),
    all_apps: bool = typer.Option(False, "--all", help="Run every part of the appliance."),
    demo: bool = typer.Option(False, "--demo", help="Seed the demo shop (before the apps)."),
) -> None:
    """Start PostgreSQL, the broker (Kafka + search APIs) and the registry, and the apps;
    idempotent."""
    ports = dict(postgres=postgres_port, kafka=kafka_port, registry=registry_port,
                 search=search_port, metrics=metrics_port, replica_metrics=replica_metrics_port,
                 search_metrics=search_metrics_port, warehouse_metrics=warehouse_metrics_port,
                 translator_metrics=translator_metrics_port, load_metrics=load_metrics_port)
    stack = _stack(root, ports)
    outcome = stack.up(stack.APPS if all_apps else tuple(apps or ()), demo=demo)
    _print_stack(stack, outcome)
    out.print(f"Endpoints are in [bold]{stack.env_file}[/]; load them with "
              f"[bold]. {_relative(stack.env_file)}[/]")
    for key, value in stack.endpoints.env().items():
        out.print(f"  {key}={redact(value)}")


@stack_app.command("down")
def stack_down(root: Path = StackDir) -> None:
    """Stop every process the stack started (data is kept)."""
    stack = _stack(root)
    outcome = stack.down()
    for name, what in outcome.items():
        out.print(f"{name}: {what}")


@stack_app.command("status")
def stack_status(root: Path = StackDir) -> None:
    """Show each service, its PID, restarts and endpoint. Exits 1 when something is not
    running (or waiting to be restarted)."""
    stack = _stack(root)
    _print_stack(stack)
    restarting = any(s.state != "running" for s in stack.supervision().values())
    if restarting or not all(stack.status().values()):
        raise typer.Exit(1)


@stack_app.command("reset")
def stack_reset(
    root: Path = StackDir,
    yes: bool = typer.Option(False, "--yes", help="Do not ask for confirmation."),
) -> None:
    """Stop the stack and delete all its data."""
    if not yes:
        typer.confirm(f"Delete {root.resolve()} and all the stack's data?", abort=True)
    _stack(root).reset()
    out.print(f"removed {root}")


@registry_app.command("serve")
def registry_serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0: every interface)."),
    port: int = typer.Option(8081, help="Port to listen on."),
    kafka: str = typer.Option(..., envvar="BOTTLER_KAFKA", help="Kafka bootstrap servers."),
    topic: str = typer.Option("_schemas", help="Compacted topic that stores the schemas."),
    max_request_bytes: int = typer.Option(1024 * 1024, help="Larger request bodies are refused "
                                          "(HTTP 413)."),
) -> None:
    """Run the schema registry (Confluent REST API subset) in the foreground."""
    from schemas.registry.server import serve

    serve(host, port, kafka, topic, max_request_bytes)


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


@demo_app.command("load")
def demo_load(
    dsn: str = typer.Option(..., "--postgres", "-d", envvar="BOTTLER_PG_DSN",
                            help="The demo shop database."),
    rate: float = typer.Option(5.0, "--rate", help="Transactions per second."),
    duration: float | None = typer.Option(None, "--duration",
                                          help="Seconds to run [default: until stopped]."),
    metrics_port: int | None = options.MetricsPort,
    metrics_host: str = options.MetricsHost,
) -> None:
    """A gentle write load on the demo shop: orders placed, paid, shipped, cancelled; prices
    changed; customers signing up (one business action per transaction)."""
    from compose.load import run_load

    if rate <= 0:
        raise BottlerError(f"--rate must be positive, not {rate}")
    options.serve_metrics(metrics_port, metrics_host)
    done = run_load(dsn, rate, stop_on_signals(), duration)
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
        err.print(f"[bold red]error:[/] {redact(str(exc))}", highlight=False)
        sys.exit(2)
