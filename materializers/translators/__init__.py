"""Business-event translators: technical change events in, business events out, exactly once
through Kafka transactions (docs/translators.md)."""

from common import lazy

__getattr__ = lazy.exports(__name__, {
    "Event": "materializers.translators.api",
    "Output": "materializers.translators.api",
    "RowChange": "materializers.translators.api",
    "Source": "materializers.translators.api",
    "Translator": "materializers.translators.api",
    "TranslatorRunner": "materializers.translators.runner",
})

__all__ = ["Event", "Output", "RowChange", "Source", "Translator", "TranslatorRunner"]
