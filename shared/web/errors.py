"""One middleware for every app: maps domain errors, msgspec-validated input and framework errors to
the contract's {error, timestamp} body with the right status, binds the request's log context
(request id, route, method; the auth guard adds the tenant), logs one canonical line per request
and records the HTTP metrics. No handler catches a 4xx itself.

An error that says the database cannot be reached (the app composer passes the db layer's test:
this layer knows nothing of the database) is answered 503 with `Retry-After`, a warning without a
traceback: the caller's retry will do, and nothing is wrong with the server."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

import structlog
from aiohttp import web

from shared import metrics, wire
from shared.domain.access import RoleRequired
from shared.domain.errors import (
    Conflict,
    ContentTooLarge,
    DomainError,
    Forbidden,
    Gone,
    NotFound,
    Overloaded,
    ProviderUnavailable,
    QuotaExceeded,
    TooManyRequests,
    Unauthorized,
    ValidationFailed,
)
from shared.logs import log_context
from shared.web.body import PayloadTooLarge, UnreadableBody, json_response

log = structlog.get_logger("queueflow.http")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# The contract's status for each kind of domain error; a subclass takes its nearest ancestor's.
STATUS_OF: dict[type[DomainError], int] = {
    ValidationFailed: 400,
    Unauthorized: 401,
    Forbidden: 403,
    RoleRequired: 403,
    NotFound: 404,
    Gone: 404,
    Conflict: 409,
    PayloadTooLarge: 413,
    ContentTooLarge: 413,
    TooManyRequests: 429,
    QuotaExceeded: 429,
    Overloaded: 503,
    ProviderUnavailable: 503,
}
REQUEST_ID = "X-Request-ID"
_REQUEST_ID_KEY = web.RequestKey("request_id", str)
# Seconds a client should wait before retrying after a 503 for an unreachable database.
RETRY_AFTER_SECS = 1
Unavailable = Callable[[BaseException], bool]


def status_of(err: DomainError) -> int:
    for cls in type(err).__mro__:
        status = STATUS_OF.get(cls)
        if status is not None:
            return status
    return 500


def error_response(status: int, message: str) -> web.Response:
    return json_response(wire.ErrorBody(error=message, timestamp=datetime.now(UTC)), status)


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


_ID_PREFIX = uuid.uuid4().hex[:12]  # this process's; a counter makes each id unique within it
_ids = itertools.count(1)


def _request_id(request: web.Request) -> str:
    """The caller's X-Request-ID when it is a sane one (printable ASCII, at most 128), else new."""
    given = request.headers.get(REQUEST_ID, "")
    if 0 < len(given) <= 128 and given.isascii() and given.isprintable():
        return given
    return f"{_ID_PREFIX}{next(_ids):08x}"


def request_id_of(request: web.Request) -> str | None:
    """The id this middleware gave the request (the caller's X-Request-ID when sane)."""
    return request.get(_REQUEST_ID_KEY)


def _has_nul(request: web.Request) -> bool:
    """Whether the path or a query value holds a NUL (the query string is split only when its
    decoded text holds one: most requests have no query at all)."""
    if "\x00" in request.path:
        return True
    return "\x00" in request.query_string and any("\x00" in v for v in request.query.values())


def unavailable_response() -> web.Response:
    response = error_response(503, "database unavailable")
    response.headers["Retry-After"] = str(RETRY_AFTER_SECS)
    return response


def client_gone(request: web.Request) -> bool:
    """Whether the caller's connection has closed (aiohttp does not cancel the handler when it does)."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _never(_err: BaseException) -> bool:
    return False


def error_middleware(unavailable: Unavailable = _never) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The middleware, with `unavailable` telling an unreachable database from a bug."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await _handle(request, handler, unavailable)

    return middleware


async def _handle(request: web.Request, handler: Handler, unavailable: Unavailable) -> web.StreamResponse:
    started = time.perf_counter()
    route = _route_label(request)
    request_id = _request_id(request)
    request[_REQUEST_ID_KEY] = request_id
    status = 500
    with log_context(request_id=request_id, route=route, method=request.method):
        try:
            if _has_nul(request):
                raise ValidationFailed("NUL characters are not allowed in the path or query")
            response = await handler(request)
            status = response.status
        except DomainError as err:
            status = status_of(err)
            response = error_response(status, err.message)
            if err.retry_after_secs is not None:
                response.headers["Retry-After"] = str(err.retry_after_secs)
            if isinstance(err, UnreadableBody):
                response.force_close()
        except web.HTTPRequestEntityTooLarge as err:
            status = 413
            response = error_response(413, PayloadTooLarge(f"payload too large: {err.text}").message)
        except web.HTTPException as err:
            status = err.status
            if err.status < 400:
                raise
            message = {404: "not found", 405: "method not allowed"}.get(err.status, err.reason.lower())
            response = error_response(err.status, message)
            if "Allow" in err.headers:  # a 405 names the methods the resource takes (RFC 9110)
                response.headers["Allow"] = err.headers["Allow"]
        except asyncio.CancelledError:
            status = 499
            raise
        except Exception as err:
            if isinstance(err, ConnectionResetError) and client_gone(request):
                status = 499
                raise
            if unavailable(err):  # a reset from the database, not from the client, lands here
                status = 503
                log.warning("request_failed_database_unavailable", path=request.path, error=str(err))
                response = unavailable_response()
            else:
                log.exception("request_failed", path=request.path)
                response = error_response(500, "internal server error")
        finally:
            elapsed = time.perf_counter() - started
            metrics.http_served(request.method, route, status, elapsed)
            # One canonical line per request: client and server errors at info, the rest at debug
            # (the worker protocol's hot routes would otherwise dominate the log).
            emit = log.info if status >= 400 else log.debug
            emit("request_served", status=status, duration_ms=round(elapsed * 1000, 2))
        if not response.prepared:
            response.headers.setdefault(REQUEST_ID, request_id)
        return response
