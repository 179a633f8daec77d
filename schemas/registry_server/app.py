"""HTTP API: the subset of Confluent Schema Registry's REST API that serializers and tools use.

Errors are {"error_code": N, "message": ...} with Confluent's codes, so Confluent clients raise
their usual SchemaRegistryError. Only Avro schemas without references are served.
"""

import json
import logging
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from .api import MEDIA_TYPE, ApiError, Call, Modes, SchemaApi
from .auth import REALM, authorized
from .settings import MAX_REQUEST_BYTES
from .store import RecordTooLarge, SchemaStore, StoreError

log = logging.getLogger(__name__)


def _reply(content: object, status: int = 200) -> Response:
    return Response(json.dumps(content), status_code=status, media_type=MEDIA_TYPE)


def _error(status: int, code: int, message: str) -> Response:
    return _reply({"error_code": code, "message": message}, status)



class _BasicAuth:
    """Every request needs a user's credentials (HTTP basic), as Confluent's registry with basic
    authentication on: 401 with error_code 401 otherwise."""

    def __init__(self, app, users: dict[str, str]):
        self.app, self.users = app, users

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
            if not authorized(header, self.users):
                response = _error(401, 401, "Unauthorized")
                response.headers["WWW-Authenticate"] = f'Basic realm="{REALM}"'
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _too_large(limit: int) -> Response:
    return _error(413, 413, f"Request body is larger than this registry accepts ({limit} bytes;"
                  " its --max-request-bytes)")


async def _body(request: Request, limit: int) -> bytes | None:
    """The request body, or None past ``limit`` bytes (never read further)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def _endpoint(api: SchemaApi, handler: Callable[[Call], object], limit: int):
    async def endpoint(request: Request) -> Response:
        raw = await _body(request, limit)
        if raw is None:
            return _too_large(limit)
        try:
            body = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            return _error(400, 400, f"Request body is not valid JSON: {exc}")
        if not isinstance(body, dict):
            return _error(400, 400, "Request body must be a JSON object")
        try:
            call = Call(dict(request.path_params), request.query_params, body)
            result = await run_in_threadpool(api.run, handler, call, request.method)
        except ApiError as exc:
            return _error(exc.status, exc.code, exc.message)
        except RecordTooLarge as exc:  # the schema, not the broker: say so
            return _error(413, 413, str(exc))
        except StoreError as exc:
            log.error("%s", exc)
            return _error(500, 50001, f"Error in the backend data store: {exc}")
        return result if isinstance(result, Response) else _reply(result)

    return endpoint


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error(exc.status_code, exc.status_code, f"HTTP {exc.status_code} {exc.detail}")


async def _crash(request: Request, exc: Exception) -> Response:
    # Logged with its traceback by Starlette; the client gets a one-line reason only.
    return _error(500, 500, f"Internal error: {type(exc).__name__}: {exc}")


def create_app(store: SchemaStore, max_request_bytes: int = MAX_REQUEST_BYTES,
               users: dict[str, str] | None = None) -> Starlette:
    """The ASGI app serving `store`, which must be started already; request bodies over
    ``max_request_bytes`` are refused with HTTP 413; with ``users`` (user: password), every
    request needs one's credentials (HTTP basic)."""
    api = SchemaApi(store)
    modes = Modes()
    table = [
        ("GET", "/", api.root),
        ("GET", "/schemas/types", api.schema_types),
        ("GET", "/schemas/ids/{id:int}", api.get_schema),
        ("GET", "/schemas/ids/{id:int}/versions", api.schema_versions),
        ("GET", "/schemas/ids/{id:int}/subjects", api.schema_subjects),
        ("GET", "/subjects", api.list_subjects),
        ("POST", "/subjects/{subject}", api.lookup),
        ("DELETE", "/subjects/{subject}", api.delete_subject),
        ("GET", "/subjects/{subject}/versions", api.list_versions),
        ("POST", "/subjects/{subject}/versions", api.register),
        ("GET", "/subjects/{subject}/versions/{version}", api.get_version),
        ("DELETE", "/subjects/{subject}/versions/{version}", api.delete_version),
        ("GET", "/subjects/{subject}/versions/{version}/schema", api.get_version_schema),
        ("POST", "/compatibility/subjects/{subject}/versions", api.test_all),
        ("POST", "/compatibility/subjects/{subject}/versions/{version}", api.test_version),
        ("GET", "/config", api.get_global_config),
        ("PUT", "/config", api.put_config),
        ("DELETE", "/config", api.delete_config),
        ("GET", "/config/{subject}", api.get_subject_config),
        ("PUT", "/config/{subject}", api.put_config),
        ("DELETE", "/config/{subject}", api.delete_config),
        ("GET", "/mode", modes.get_mode),
        ("PUT", "/mode", modes.put_mode),
        ("GET", "/mode/{subject}", modes.get_mode),
        ("PUT", "/mode/{subject}", modes.put_mode),
        ("DELETE", "/mode/{subject}", modes.delete_mode),
        ("GET", "/contexts", modes.contexts),
    ]
    routes = [Route(path, _endpoint(api, fn, max_request_bytes), methods=[method])
              for method, path, fn in table]
    return Starlette(
        routes=routes, exception_handlers={HTTPException: _http_error, Exception: _crash},
        middleware=[Middleware(_BasicAuth, users=users)] if users else [],
    )
