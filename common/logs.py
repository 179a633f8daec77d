"""Logging for every bottler process: one format, and no password ever reaches a log line."""

import logging
import re
import threading
import time
from typing import Any

from common.redact import redact

_NUMBERS = re.compile(r"\d+")  # a line's kind: its text with the numbers (ports, counts) blanked


class RedactingFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        return True


def setup_logging(level: int = logging.INFO) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
    for chatty in ("httpx", "httpx2"):  # one INFO line per HTTP request otherwise
        logging.getLogger(chatty).setLevel(logging.WARNING)


class RateLimited:
    """A logger's lines, each kind at most once per ``interval`` seconds, the next one saying how
    many were held back: for what repeats while a service is down (a broker's reconnects). A
    kind is a line's level and text with its numbers blanked. Thread-safe; its ``log`` is what
    librdkafka's ``logger`` property calls."""

    def __init__(self, logger: logging.Logger, interval: float = 60.0, kinds: int = 1000):
        self.logger, self.interval, self.kinds = logger, interval, kinds
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, str], tuple[float, int]] = {}  # -> (logged at, held back)

    def log(self, level: int, fmt: str, *args: Any) -> None:
        text = fmt % args if args else fmt
        kind = (level, _NUMBERS.sub("#", text))
        now = time.monotonic()
        with self._lock:
            logged, held = self._seen.get(kind, (None, 0))
            if logged is not None and now - logged < self.interval:
                self._seen[kind] = (logged, held + 1)
                return
            if len(self._seen) >= self.kinds:
                self._seen.clear()
            self._seen[kind] = (now, 0)
        more = f" ({held} more like it in the last {now - logged:.0f} s)" if held else ""
        self.logger.log(level, "%s%s", text, more)

    def warning(self, fmt: str, *args: Any) -> None:
        self.log(logging.WARNING, fmt, *args)
