"""Business-event translators: technical change events in, business events out, exactly once
through Kafka transactions."""
