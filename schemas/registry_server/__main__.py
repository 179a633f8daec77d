"""python -m schemas.registry_server: the Confluent-compatible schema registry of the embedded
stack. Its settings are `bottler registry serve`'s (flags, BOTTLER_* variables, --config file)."""

import argparse
import sys

from common import flags
from common.config import load
from common.errors import BottlerError
from common.redact import redact

from .server import serve
from .settings import ServeSettings
from .store import StoreError


def parser() -> argparse.ArgumentParser:
    """`bottler registry serve`'s options, from the same declarations (common/flags.py)."""
    parser = argparse.ArgumentParser(
        prog="python -m schemas.registry_server",
        description="Schema registry speaking Confluent's REST API, storing schemas in Kafka.",
    )
    for option in flags.options(ServeSettings):
        shown = f" [{option.default}]" if option.default is not None else ""
        parser.add_argument(*option.flag.names, dest=option.param, metavar=option.flag.metavar,
                            action="append" if option.kind == list[str] else "store",
                            type=option.kind if option.kind in (int, float) else None,
                            help=f"{option.flag.help}{shown} (env {option.env})")
    parser.add_argument("--config", help="YAML file of these settings")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        serve(load(ServeSettings, vars(args)))
    except (StoreError, BottlerError) as exc:
        print(f"schema registry: {redact(str(exc))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
