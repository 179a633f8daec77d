"""`make bench`: start an isolated embedded stack, measure, print one report."""

from __future__ import annotations

from compose.stack import isolated_stack
from tests.bench import ceilings
from tests.bench.report import print_report


def main() -> None:
    with isolated_stack() as stack:
        ep = stack.endpoints
        figures = [
            ceilings.copy_out(ep.pg_dsn),
            ceilings.broker_produce(ep.kafka),
        ]
    print_report(figures)


if __name__ == "__main__":
    main()
