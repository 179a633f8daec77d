"""Helpers every part of bottler shares (errors, redaction, Postgres connections, signals, Kafka
and logging defaults, command-line options). A leaf: it imports nothing else of the project."""
