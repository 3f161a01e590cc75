"""The SDK's exceptions.

Every HTTP error answer is an `ApiError` (a subclass chosen by status) carrying the status and the
server's decoded `{error, timestamp}` body. A request that never got an answer (connection
refused or reset, timeout, DNS) is a `TransportError`.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from unofficial_queueflow_client.models import ErrorBody

__all__ = [
    "ApiError",
    "BadRequest",
    "Conflict",
    "Forbidden",
    "MethodNotAllowed",
    "NotFound",
    "PayloadTooLarge",
    "PermanentError",
    "QueueFlowError",
    "ServerError",
    "ServiceUnavailable",
    "TransportError",
    "Unauthorized",
    "UnexpectedResponse",
    "error_for_item",
    "error_for_status",
]

_error_decoder = msgspec.json.Decoder(ErrorBody)


class QueueFlowError(Exception):
    """Base of every exception the SDK raises."""


class TransportError(QueueFlowError):
    """The request got no HTTP answer: connection refused or reset, timeout, DNS failure."""


class UnexpectedResponse(QueueFlowError):
    """A 2xx answer whose body is not what the route documents."""


class ApiError(QueueFlowError):
    """The server answered with an HTTP error status.

    ``status`` is the HTTP status, ``body`` the decoded `ErrorBody` (``None`` when the answer was not
    one, e.g. from a proxy), ``raw`` the body's JSON (or text) as received.
    """

    status: int = 0

    def __init__(self, status: int, body: ErrorBody | None, raw: Any = None) -> None:
        self.status = status
        self.body = body
        self.raw = raw
        message = body.error if body is not None else (str(raw)[:200] if raw else "no body")
        super().__init__(f"HTTP {status}: {message}")

    @property
    def message(self) -> str | None:
        """The server's error message, if it sent the usual error body."""
        return self.body.error if self.body is not None else None

    @property
    def retryable(self) -> bool:
        """Whether sending the same request again later may succeed (5xx, 408, 429)."""
        return self.status >= 500 or self.status in (408, 429)


class BadRequest(ApiError):
    """400: the request was malformed or invalid (the message names the problem)."""


class Unauthorized(ApiError):
    """401: no credential, or an unknown one."""


class Forbidden(ApiError):
    """403: the credential may not do this (read-only key, tenant token on a worker route, ...)."""


class NotFound(ApiError):
    """404: no such resource for this tenant."""


class MethodNotAllowed(ApiError):
    """405."""


class Conflict(ApiError):
    """409: the resource is in a state that forbids the call (lease lost, already cancelled, ...)."""


class PayloadTooLarge(ApiError):
    """413: the body exceeds the server's limit."""


class ServerError(ApiError):
    """5xx: the server failed; the call may succeed later."""


class ServiceUnavailable(ServerError):
    """503: the server is starting, draining, or its database is unavailable."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    409: Conflict,
    413: PayloadTooLarge,
    503: ServiceUnavailable,
}


def error_for_status(status: int, content: bytes) -> ApiError:
    """The `ApiError` for an error answer: the subclass of its status, with its body decoded."""
    body: ErrorBody | None
    try:
        body = _error_decoder.decode(content)
    except (msgspec.DecodeError, msgspec.ValidationError):
        body = None
    try:
        raw: Any = json.loads(content) if content else None
    except ValueError:
        raw = content.decode("utf-8", errors="replace")
    return _class_of(status)(status, body, raw)


def error_for_item(status: int, message: str | None) -> ApiError:
    """The `ApiError` one item of a batch answer stands for (e.g. a `CompletionAnswer` with status
    409 is a `Conflict`). An item has no error body of its own: ``body`` is ``None`` and ``raw`` is the
    item's error message."""
    return _class_of(status)(status, None, message)


def _class_of(status: int) -> type[ApiError]:
    return _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)


class PermanentError(Exception):
    """Raise from a worker handler to fail the job without retries (it is dead-lettered at once).

    Any exception with a ``retryable = False`` attribute is treated the same way.
    """

    retryable = False
