"""The stream: the slot's pgoutput messages, decoded and handed on in commit order.

- replication.py: the replication connection and its options;
- pgoutput.py decodes into the types of source/messages.py; large transactions the server streams
  before they commit wait in spool.py until streamed.py replays them;
- tables.py keeps each table's codec up with its DDL (schema_changes.py; drift.py for DDL no
  message brought), and table_watch.py looks between transactions for tables to publish again;
- streamer.py is the loop: changes.py sends each row change within its Transaction
  (transaction.py) to the publish room, feedback.py confirms to the server what Kafka
  acknowledged (the Positions), heartbeat.py keeps a quiet slot moving.
"""
