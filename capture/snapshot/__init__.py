"""The snapshot: every published table copied inside the slot's exported snapshot before the
stream starts (exported.py), and tables re-published in chunks while the stream runs
(incremental.py), asked for by a request written into the WAL (request.py)."""
