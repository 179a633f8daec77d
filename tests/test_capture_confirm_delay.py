"""--confirm-delay: an acknowledged position is confirmed to PostgreSQL only once it has been
acknowledged for that long (a broker that saves periodically may lose what it just acked)."""

from __future__ import annotations

from collections import deque

from capture.stream import Streamer


def streamer(delay: float) -> Streamer:
    s = Streamer.__new__(Streamer)  # the feedback logic only; no connections
    s.confirm_delay, s.confirmed_sent = delay, 0
    s._acked = deque()
    return s


def test_positions_are_confirmed_only_after_the_delay():
    s = streamer(5.0)
    assert s._delayed(100, now=0.0) == 0  # acked now: not yet
    assert s._delayed(200, now=3.0) == 0
    assert s._delayed(300, now=5.0) == 100  # acked at 0 s, 5 s ago
    s.confirmed_sent = 100
    assert s._delayed(300, now=7.9) == 100
    assert s._delayed(300, now=8.0) == 200
    assert s._delayed(300, now=60.0) == 300  # idle: the last one comes through too
    assert streamer(0.0)._delayed(400, now=0.0) == 400  # no delay: at once
