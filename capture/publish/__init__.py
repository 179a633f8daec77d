"""Encode → publish → acknowledge: rows become Kafka keys and values (encoding.py, with the
schemas registered by registrar.py; control events, control.py), sent by one idempotent producer
(publisher.py, settings in producer_config.py); a row that cannot be sent is a DataError
(errors.py) that --on-error decides, its text (row.py) going to its dead letter
(dead_letters.py); a WAL position is confirmed only once Kafka acknowledged everything before it
(acks.py)."""
