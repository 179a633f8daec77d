"""python -m schemas.registry_server: the Confluent-compatible schema registry of the embedded
stack. Its settings are `bottler registry serve`'s (flags, BOTTLER_* variables, --config file)."""

import argparse
import sys

from common.config import load
from common.errors import BottlerError
from common.redact import redact

from .server import serve
from .settings import ServeSettings
from .store import StoreError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m schemas.registry_server",
        description="Schema registry speaking Confluent's REST API, storing schemas in Kafka.",
    )
    parser.add_argument("--host", help="address to listen on [127.0.0.1]")
    parser.add_argument("--port", type=int, help="port to listen on [8081]")
    parser.add_argument("--broker", "--kafka", dest="broker", help="Kafka bootstrap servers")
    parser.add_argument("-C", "--kafka-config", dest="kafka_config", action="append",
                        help="Kafka client property prop=value (repeatable)")
    parser.add_argument("--topic", help="compacted topic holding the schemas [_schemas]")
    parser.add_argument("--max-request-bytes", type=int,
                        help="larger request bodies are refused (HTTP 413)")
    parser.add_argument("--users-file", help="user:password lines: basic authentication")
    parser.add_argument("--config", help="YAML file of these settings")
    args = parser.parse_args(argv)
    try:
        serve(load(ServeSettings, vars(args)))
    except (StoreError, BottlerError) as exc:
        print(f"schema registry: {redact(str(exc))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
