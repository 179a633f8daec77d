"""python -m schemas.registry: the Confluent-compatible schema registry of the embedded stack."""

import argparse
import sys

from .app import MAX_REQUEST_BYTES
from .server import serve
from .store import StoreError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m schemas.registry",
        description="Schema registry speaking Confluent's REST API, storing schemas in Kafka.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8081, help="port to listen on")
    parser.add_argument("--kafka", default="127.0.0.1:9092", help="Kafka bootstrap servers")
    parser.add_argument("--topic", default="_schemas", help="compacted topic holding the schemas")
    parser.add_argument("--max-request-bytes", type=int, default=MAX_REQUEST_BYTES,
                        help="larger request bodies are refused (HTTP 413)")
    args = parser.parse_args(argv)
    try:
        serve(args.host, args.port, args.kafka, args.topic, args.max_request_bytes)
    except StoreError as exc:
        print(f"schema registry: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
