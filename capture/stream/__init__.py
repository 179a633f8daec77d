"""The stream: pgoutput messages read from the slot and decoded (pgoutput.py; large transactions
staged until they commit, spool.py), each table's codec kept up with its DDL (tables.py,
schema_changes.py, drift.py), and the loop that hands each change to the publish room in commit
order and reports back to the server what Kafka acknowledged (streamer.py and its helpers)."""
