"""The embedded stack: PostgreSQL, Apache Kafka, OpenSearch, the schema registry server and the
appliance's own apps as local processes (``bottler stack``, ``make up``), and the demo shop."""
