"""Health: the WAL the slot makes the source keep, a slot PostgreSQL gave up and its recovery
(slot_safety.py), and the capture's Prometheus metrics (metrics.py)."""
