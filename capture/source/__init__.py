"""Connecting and the slot: the source database's connections, checks and catalogs (the
published tables, their keys and column types), the capture's publications, and the
replication slot with its exported snapshot; and what the slot sends, pgoutput's messages
(messages.py), which every room after it speaks of."""
