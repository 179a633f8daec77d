"""Business-event translators: technical change events in, business events out, exactly once
through Kafka transactions (docs/translators.md)."""

from materializers.translators.api import Event, Output, RowChange, Source, Translator
from materializers.translators.runner import TranslatorRunner

__all__ = ["Event", "Output", "RowChange", "Source", "Translator", "TranslatorRunner"]
