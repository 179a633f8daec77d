"""Views run until they equal the source: a view caught up again and again (a restart each time)
while the capture may still publish, and the consumer loop caught up once."""

from __future__ import annotations

import time

from materializers.core import Materializer


def converge(read, expected: list[tuple], run, timeout: float = 120) -> None:
    """Runs a view until caught up, again (a restart each time) until it equals the source:
    the capture may still be publishing the last changes."""
    deadline = time.monotonic() + timeout
    while True:
        run()
        got = sorted(read())
        if got == expected:
            return
        if time.monotonic() > deadline:
            wrong = [(a, b) for a, b in zip(got, expected, strict=False) if a != b][:5]
            raise AssertionError(f"{len(got)} rows, {len(expected)} expected; first "
                                 f"differences (view, source): {wrong}")
        time.sleep(1)


def loop(stack, prefix, sink, group: str) -> None:
    Materializer(sink, bootstrap=stack.kafka, registry=stack.registry_url, group_id=group,
                 prefix=prefix, batch_timeout=0.2, progress=False).run_until_caught_up(60)
