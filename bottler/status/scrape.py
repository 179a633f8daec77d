"""Reading one app's Prometheus endpoint into figures: the capture's and each materializer's."""

from __future__ import annotations

from collections import defaultdict

import httpx
from prometheus_client.parser import text_string_to_metric_families

from bottler.status.figures import App, Capture, Materializer
from common.redact import redact


def scrape(name: str, url: str, timeout: float = 3.0) -> App:
    """The app as its endpoint shows it; down (with the reason) when the endpoint does not
    answer with metrics."""
    try:
        response = httpx.get(url, timeout=timeout)
        response.raise_for_status()
        samples = [s for family in text_string_to_metric_families(response.text)
                   for s in family.samples]
    except httpx.HTTPError as exc:
        reason = redact(str(exc)) or type(exc).__name__
        return App(name, url, error=f"no answer from {redact(url)}: {reason}")
    except ValueError as exc:  # not the Prometheus text format
        return App(name, url, error=f"{redact(url)} does not serve metrics: {exc}")
    return App(name, url, capture=_capture(name, samples),
               materializers=_materializers(name, samples),
               load_transactions=_load_transactions(samples))


def _load_transactions(samples) -> int | None:
    counts = [s.value for s in samples if s.name == "bottler_load_transactions_total"]
    return int(sum(counts)) if counts else None


def _capture(app: str, samples) -> Capture | None:
    values: dict[str, float] = defaultdict(float)
    for s in samples:
        if s.name.startswith("bottler_capture_"):
            values[s.name] += s.value  # labelled series (events by table and op) are summed
    if "bottler_capture_snapshot_complete" not in values:
        return None
    return Capture(
        app=app,
        snapshot_complete=values["bottler_capture_snapshot_complete"] == 1,
        streaming=values["bottler_capture_streaming"] == 1,
        snapshot_rows=int(values["bottler_capture_snapshot_rows"]),
        events=int(values["bottler_capture_events_total"]),
        lag_bytes=int(values["bottler_capture_lag_bytes"]),
        dead_letters=int(values["bottler_capture_dead_letters_total"]),
    )


def _materializers(app: str, samples) -> list[Materializer]:
    found: dict[str, Materializer] = {}
    for s in samples:
        name = s.labels.get("materializer")
        if not s.name.startswith("bottler_materializer_") or name is None:
            continue
        m = found.setdefault(name, Materializer(name, app, caught_up=None))
        if s.name == "bottler_materializer_caught_up":
            m.caught_up = s.value == 1
        elif s.name == "bottler_materializer_lag_messages":
            topic = s.labels.get("topic", "?")
            m.lag[topic] = m.lag.get(topic, 0) + int(s.value)
        elif s.name == "bottler_materializer_changes_total":
            m.changes += int(s.value)
        elif s.name == "bottler_materializer_dead_letters_total":
            m.dead_letters += int(s.value)
    return [found[name] for name in sorted(found)]
