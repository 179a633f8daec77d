"""Encode → publish → acknowledge: rows become Kafka keys and values (encoding.py, with the
schemas registered by registrar.py; control events, control.py), are sent by one idempotent
producer (publisher.py), or, refused, follow --on-error (dead_letters.py), and a WAL position is
confirmed only once Kafka acknowledged everything before it (acks.py)."""
