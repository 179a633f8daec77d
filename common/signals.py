"""How the long-running commands stop: one way for all of them."""

from __future__ import annotations

import signal
import threading


def stop_on_signals() -> threading.Event:
    """An event SIGINT or SIGTERM sets, so a loop finishes its batch and exits cleanly (status 0)
    instead of dying mid-write."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop
