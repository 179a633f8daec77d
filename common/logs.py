"""Logging for every bottler process: one format, and no password ever reaches a log line."""

import logging

from common.redact import redact


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
