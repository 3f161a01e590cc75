"""HTTP plumbing every service shares: the error and access-log middlewares, body decoding and
JSON responses with msgspec, and the operational routes (/health, /ready, /metrics)."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any, TypeVar

import msgspec
import structlog
from aiohttp import http_exceptions, web, web_protocol
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

import shared
from shared import metrics, wire
from shared.db import jobs as jobs_db
from shared.domain import DomainError, PayloadTooLarge, ValidationFailed
from shared.runtime import RESOURCES

log = structlog.get_logger("queueflow.http")
T = TypeVar("T")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_encoder = msgspec.json.Encoder()
_decoders: dict[type, msgspec.json.Decoder[Any]] = {}


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(body=_encoder.encode(body), status=status, content_type="application/json")


def error_response(status: int, message: str) -> web.Response:
    return json_response(wire.ErrorBody(error=message, timestamp=datetime.now(UTC)), status)


def _validation_detail(err: msgspec.MsgspecError) -> str:
    text = str(err)
    return text[0].lower() + text[1:] if text else "malformed body"


class UnreadableBody(ValidationFailed):
    """A 400 after which the connection closes: what is left of the body cannot be parsed."""


# Deeper JSON than this is refused: it is never needed, and every layer below (PostgreSQL's jsonb
# encoding, the workflow engine's conditions and context merges) would otherwise have to survive
# recursion limits.
MAX_JSON_DEPTH = 100


async def decode(request: web.Request, typ: type[T]) -> T:
    """The request body as `typ`: malformed JSON, wrong types, unknown fields, out-of-range values
    and nesting deeper than MAX_JSON_DEPTH are a 400 naming the problem; an empty body counts as `{}`."""
    decoder = _decoders.get(typ)
    if decoder is None:
        decoder = _decoders[typ] = msgspec.json.Decoder(typ)
    try:
        raw = await request.read()
    except (http_exceptions.HttpProcessingError, web.RequestPayloadError):
        # Typically a Content-Encoding the body does not match (a truncated or plain gzip body).
        # The rest of it cannot be read either: aiohttp must not try to after the answer, and the
        # connection closes with it.
        request.content.feed_eof()
        encoding = request.headers.get("Content-Encoding")
        raise UnreadableBody(
            f"the body is not valid {encoding} data" if encoding else "the body could not be read"
        ) from None
    if nested_deeper_than(raw, MAX_JSON_DEPTH):
        raise ValidationFailed(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = decoder.decode(raw if raw.strip() else b"{}")
    except msgspec.ValidationError as err:
        raise ValidationFailed(_validation_detail(err)) from None
    except msgspec.DecodeError as err:
        raise ValidationFailed(f"malformed JSON: {_validation_detail(err)}") from None
    except RecursionError:  # not valid JSON, so not measured above
        raise ValidationFailed(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    if b"\\u0000" in raw and _has_nul(msgspec.to_builtins(value)):
        raise ValidationFailed("NUL characters (\\u0000) cannot be stored")
    return value


_NOT_STRUCTURE = bytes(range(256)).translate(None, b'{}[]"')
_INNERMOST_PAIRS = re.compile(rb"\{\}|\[\]")


def nested_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether JSON `raw` nests objects and arrays more than `limit` deep, found without recursion
    and before decoding: drop the escapes that involve a quote or a backslash, keep only brackets
    and quotes, drop what lies between quotes, then peel the innermost pairs off once per level.
    (For malformed JSON the answer is a guess, but such a body is refused either way.)"""
    if raw.count(b"{") + raw.count(b"[") <= limit:
        return False  # too few brackets to nest that deep
    skeleton = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    skeleton = b"".join(skeleton.split(b'"')[::2])  # the even pieces lie outside strings
    for _ in range(limit):
        if not skeleton:
            return False
        skeleton = _INNERMOST_PAIRS.sub(b"", skeleton)
    return bool(skeleton)


def _has_nul(value: Any) -> bool:
    """PostgreSQL text and jsonb cannot hold U+0000: look for it anywhere in a decoded body."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Maps domain errors and framework errors to the contract's {error, timestamp} body, logs one
    canonical line per request and records the HTTP metrics."""
    started = time.perf_counter()
    status = 500
    try:
        if "\x00" in request.path or any("\x00" in v for v in request.query.values()):
            raise ValidationFailed("NUL characters are not allowed in the path or query")
        response = await handler(request)
        status = response.status
        return response
    except DomainError as err:
        status = err.status
        response = error_response(err.status, err.message)
        if isinstance(err, UnreadableBody):
            response.force_close()
        return response
    except web.HTTPRequestEntityTooLarge as err:
        status = 413
        return error_response(413, PayloadTooLarge(f"payload too large: {err.text}").message)
    except web.HTTPException as err:
        status = err.status
        if err.status < 400:
            raise
        message = {404: "not found", 405: "method not allowed"}.get(err.status, err.reason.lower())
        return error_response(err.status, message)
    except (asyncio.CancelledError, ConnectionResetError):
        status = 499
        raise
    except Exception:
        log.exception("request_failed", method=request.method, path=request.path)
        return error_response(500, "internal server error")
    finally:
        route = _route_label(request)
        elapsed = time.perf_counter() - started
        metrics.HTTP_REQUESTS.labels(request.method, route, str(status)).inc()
        metrics.HTTP_DURATION.labels(request.method, route).observe(elapsed)
        # One canonical line per request: client and server errors at info, the rest at debug
        # (the worker protocol's hot routes would otherwise dominate the log).
        emit = log.info if status >= 400 else log.debug
        emit(
            "request_served",
            method=request.method,
            route=route,
            status=status,
            duration_ms=round(elapsed * 1000, 2),
        )


# --- requests aiohttp cannot parse ----------------------------------------------------------------


def answer_malformed_http_with_json() -> None:
    """aiohttp answers a request it cannot parse (a bad request line, header or Content-Length, an
    over-long line, an unsupported Content-Encoding) by itself, before any middleware runs: in
    text/plain, quoting the offending bytes, with a traceback in the log. Called once at start-up,
    this gives those answers the contract's error body and a one-line log instead."""
    web_protocol.RequestHandler.handle_error = _protocol_error  # type: ignore[method-assign]


def _protocol_error(
    self: web_protocol.RequestHandler,
    request: web.BaseRequest,
    status: int = 500,
    exc: BaseException | None = None,
    message: str | None = None,
) -> web.StreamResponse:
    if request.writer.output_size > 0:  # the response had begun: all that is left is to close
        raise ConnectionError("the response was already being sent")
    if isinstance(exc, http_exceptions.ContentEncodingError):
        text = "unsupported or corrupt Content-Encoding"
    elif isinstance(exc, http_exceptions.LineTooLong):
        text = "request line or header too long"
    elif isinstance(exc, http_exceptions.BadHttpMessage):
        text = "malformed HTTP request"
    elif status >= 500:
        text = "internal server error"
    else:
        text = HTTPStatus(status).phrase.lower()
    if status >= 500:
        log.error("request_failed", status=status, exc_info=exc)
    else:
        log.info("malformed_http_request", status=status, error=type(exc).__name__ if exc else None)
    response = error_response(status, text)
    response.force_close()
    return response


# --- operational routes --------------------------------------------------------------------------


async def health(request: web.Request) -> web.Response:
    res = request.app[RESOURCES]
    try:
        await asyncio.wait_for(res.pool.fetchval("SELECT 1"), 2)
    except Exception:
        return error_response(503, "database unavailable")
    return json_response(
        wire.HealthStatus(status="healthy", timestamp=datetime.now(UTC), version=shared.__version__)
    )


async def ready(request: web.Request) -> web.Response:
    res = request.app[RESOURCES]
    if res.draining:
        return error_response(503, "shutting down")
    try:
        await asyncio.wait_for(res.pool.fetchval("SELECT 1"), 2)
    except Exception:
        return error_response(503, "database not ready")
    return json_response(wire.ReadyStatus(status="ready"))


async def metrics_endpoint(request: web.Request) -> web.Response:
    res = request.app[RESOURCES]
    try:
        rows = await asyncio.wait_for(jobs_db.queue_gauges(res.pool), 5)
    except Exception:
        rows = None
    metrics.set_queue_gauges(rows)
    return web.Response(body=generate_latest(metrics.REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})


def add_ops_routes(app: web.Application, with_metrics: bool = True) -> None:
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    if with_metrics:
        app.router.add_get("/metrics", metrics_endpoint)
