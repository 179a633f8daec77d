"""Prometheus metrics of the translators (besides the materializer metrics they share: lag,
caught up, changes, batches, dead letters; labelled with the translator's group id)."""

from prometheus_client import Counter, Gauge

EVENTS = Counter(
    "bottler_translator_events_total", "business events committed", ["translator", "topic"]
)
ABORTS = Counter(
    "bottler_translator_aborted_transactions_total",
    "transactions aborted and retried after a broker error", ["translator"],
)
STATE_ROWS = Gauge(
    "bottler_translator_state_rows", "rows in the translator's keyed state", ["translator"]
)
