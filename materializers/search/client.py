"""A small HTTP client for the search cluster's REST API, the same for Elasticsearch 8/9 and
OpenSearch 1/2/3 (the official ``elasticsearch`` client refuses OpenSearch, and the few calls
made here need nothing more than JSON over HTTP).

Requests that fail with 429 or a 5xx status, or cannot connect, are retried with exponential
backoff; anything else raises :class:`SearchError` at once. ``SearchClient.refused`` counts the
answers that asked to retry, by status (of whole requests here, of bulk items in bulk.py).
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import urllib3

from common.errors import BottlerError
from common.redact import redact

log = logging.getLogger(__name__)

RETRY_STATUSES = frozenset({429, 502, 503, 504})


class SearchError(BottlerError):
    """The cluster answered a request with an error (after retries, where they apply)."""

    def __init__(self, message: str, status: int | None = None, body: Any = None,
                 hint: str | None = None):
        super().__init__(message, hint)
        self.status = status
        self.body = body

    @property
    def error_type(self) -> str | None:
        """``error.type`` of the answer (``index_not_found_exception``…), if any."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), dict):
            return self.body["error"].get("type")
        return None


@dataclass(frozen=True)
class Flavour:
    """What answers at the URL: ``elasticsearch`` or ``opensearch``, and its major version."""

    name: str
    major: int
    version: str

    @property
    def flattened(self) -> str:
        """The field type for a JSON object searched as a whole, without a mapping per key."""
        return "flat_object" if self.name == "opensearch" else "flattened"

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


class SearchClient:
    """``request(method, path, body)`` against one cluster URL (``http://user:pw@host:9200``:
    the user info becomes basic authentication). ``retries`` attempts for retryable failures,
    with backoff from ``backoff`` seconds, doubling, up to ``max_backoff``."""

    def __init__(self, url: str, *, timeout: float = 60.0, retries: int = 8,
                 backoff: float = 0.1, max_backoff: float = 10.0):
        parts = urlsplit(url if "://" in url else f"http://{url}")
        self.url = f"{parts.scheme}://{parts.hostname}:{parts.port or 9200}{parts.path}".rstrip("/")
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if parts.username:
            token = f"{parts.username}:{parts.password or ''}".encode()
            self.headers["Authorization"] = "Basic " + base64.b64encode(token).decode()
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.http = urllib3.PoolManager(
            maxsize=4, retries=False, timeout=urllib3.Timeout(connect=10, read=timeout)
        )
        self._flavour: Flavour | None = None
        # status -> answers asking to retry: requests refused whole, bulks with refused items
        self.refused: Counter[int] = Counter()
        self._lock = threading.Lock()

    def count_refused(self, status: int) -> None:
        with self._lock:  # bulk requests run in threads
            self.refused[status] += 1

    # -- requests ---------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None, *,
                params: dict[str, Any] | None = None, ndjson: bool = False,
                ok: tuple[int, ...] = (), decode: Callable[[bytes], Any] | None = None) -> Any:
        """The decoded JSON answer. ``body`` is a JSON-able value, or bytes sent as they are
        (``ndjson``: with the bulk content type). A status in ``ok`` is returned as the answer
        instead of raising (``{"status": 404, ...}``). ``decode``: how a successful answer is
        read (JSON by default)."""
        url = self.url + path
        if params:
            url += "?" + urlencode({k: _param(v) for k, v in params.items()})
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        headers = self.headers
        if ndjson:
            headers = {**headers, "Content-Type": "application/x-ndjson"}
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                response = self.http.request(method, url, body=data, headers=headers)
            except urllib3.exceptions.HTTPError as exc:
                if attempt == self.retries:
                    raise SearchError(f"cannot reach the search cluster at {redact(self.url)}:"
                                      f" {exc}", hint="check --search and that it runs") from exc
                reason = str(exc)
            else:
                status = response.status
                answer = (decode if decode is not None and status < 300 else decode_answer)(
                    response.data)
                if status < 300 or status in ok:
                    if isinstance(answer, dict) and status >= 300:
                        answer.setdefault("status", status)
                    return answer
                if status in RETRY_STATUSES:
                    self.count_refused(status)
                if status not in RETRY_STATUSES or attempt == self.retries:
                    raise SearchError(f"{method} {path}: {status} {_reason(answer)}",
                                      status, answer)
                reason = f"{status} {_reason(answer)}"
            log.warning("search %s %s: %s; retrying in %.1f s", method, path, reason, delay)
            time.sleep(delay)
            delay = min(delay * 2, self.max_backoff)
        raise AssertionError("unreachable")

    def flavour(self) -> Flavour:
        """Elasticsearch or OpenSearch, from the root endpoint (cached)."""
        if self._flavour is None:
            info = self.request("GET", "/")
            version = info.get("version", {})
            name = "opensearch" if version.get("distribution") == "opensearch" else \
                "elasticsearch"
            number = str(version.get("number", "0"))
            self._flavour = Flavour(name, int(number.split(".")[0] or 0), number)
        return self._flavour

    # -- the calls used here ----------------------------------------------------------------

    def exists(self, index: str) -> bool:
        """Whether an index or alias of that name exists."""
        answer = self.request("GET", f"/{quote(index)}/_settings/index.uuid", ok=(404,))
        return answer.get("status") != 404

    def index_uuid(self, index: str) -> str | None:
        """The index's uuid (its identity across a delete and re-create), or None if there is
        no such index."""
        answer = self.request("GET", f"/{quote(index)}/_settings/index.uuid", ok=(404,))
        if answer.get("status") == 404:
            return None
        for settings in answer.values():
            return settings["settings"]["index"]["uuid"]
        return None

    def refresh(self, index: str) -> None:
        self.request("POST", f"/{quote(index)}/_refresh")


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def decode_answer(data: bytes) -> Any:
    """An answer's JSON (an error object if it is not JSON)."""
    if not data:
        return None
    try:
        return json.loads(data)
    except ValueError:
        return {"error": {"type": "invalid_response", "reason": data[:200].decode("utf-8",
                                                                                    "replace")}}


def _reason(answer: Any) -> str:
    if isinstance(answer, dict):
        error = answer.get("error")
        if isinstance(error, dict):
            return f"{error.get('type')}: {error.get('reason')}"
        if error is not None:
            return str(error)
    return str(answer)[:300]
