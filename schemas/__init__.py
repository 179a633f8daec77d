"""The contracts between the capture and the views: PostgreSQL types in Avro (:mod:`.pgtypes`),
the row schemas and their encoding (:mod:`.avro_schema`, :mod:`.serde`, the compiled
:mod:`.avro_writer` and :mod:`.avro_reader`), topic names and records (:mod:`.topics`,
:mod:`.ownership`, :mod:`.control`), schema evolution, and the schema registry server
(:mod:`.registry_server`)."""
