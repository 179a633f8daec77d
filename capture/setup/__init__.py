"""Set-up and undo: the capture's topics (topics.py), its progress records in Kafka (state.py;
their shape is schemas/progress.py), and the removal of what a failed start created (undo.py)."""
