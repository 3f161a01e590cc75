"""The contract's error body for requests aiohttp cannot parse.

aiohttp answers a request it cannot parse (a bad request line, header or Content-Length, an
over-long line, an unsupported Content-Encoding) by itself, before any middleware runs: in
text/plain, quoting the offending bytes, with a traceback in the log. It offers no supported hook
for those answers (middlewares never see them; `web.Server` builds its `RequestHandler` with no
choice of class, and the access-log class only logs), so this module replaces
`RequestHandler.handle_error`, the one method that writes them. Every app factory calls
`install()` (shared/runtime/app.py), so in-process tests run with it too; aiohttp is pinned to the
minor release this was written against, and tests/web/test_protocol_patch.py fails when the
replaced method's signature changes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from http import HTTPStatus

import structlog
from aiohttp import http_exceptions, web, web_protocol

from shared.web.errors import error_response

log = structlog.get_logger("queueflow.http")

# The method replaced, and its signature as written against aiohttp 3.14.
ORIGINAL = web_protocol.RequestHandler.handle_error
PATCHED_SIGNATURE = "(self, request, status=500, exc=None, message=None)"


def signature_of(fn: Callable[..., object]) -> str:
    """Parameter names and defaults, without annotations: what the patch relies on."""
    params = inspect.signature(fn).parameters.values()
    return (
        "(" + ", ".join(p.name if p.default is p.empty else f"{p.name}={p.default!r}" for p in params) + ")"
    )


def install() -> None:
    """Replace aiohttp's plain-text parse-error answers with the contract's body (idempotent)."""
    web_protocol.RequestHandler.handle_error = _protocol_error  # type: ignore[method-assign]  # no supported hook


def installed() -> bool:
    return web_protocol.RequestHandler.handle_error is _protocol_error


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
