"""Cross-origin requests from browsers, built once from the settings: every origin is allowed until
`--cors-origins` (QUEUEFLOW_CORS_ORIGINS) names some, then only those, with any method and any
header. Entries that are not an origin (`scheme://host[:port]`) are skipped with a warning at start.

Two parts of one `Cors` object, both installed by `base_app`:
- `middleware` answers preflights (OPTIONS with Origin and Access-Control-Request-Method) itself,
  before routing's 404/405 and before any auth guard: 204 with the allowed methods, the requested
  headers plus `Authorization` by name (a `*` there does not cover Authorization, by the Fetch
  standard) and a max age; a disallowed origin's preflight is a 403 with the contract's error body.
  It sits inside the error middleware, so preflights are logged, counted and carry X-Request-ID.
- `on_response_prepare` adds Access-Control-Allow-Origin and Access-Control-Expose-Headers to every
  answer to an allowed origin just before its headers are sent: handlers' answers, the error
  middleware's (401s, 404s, 500s), and streams that a handler prepares itself (SSE), which no
  middleware could change after the fact. Restricted, every answer carries `Vary: Origin`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

import structlog
from aiohttp import hdrs, web

from shared.config import Settings
from shared.domain.errors import Forbidden, ValidationFailed
from shared.web.errors import REQUEST_ID, Handler

log = structlog.get_logger("queueflow.cors")

# The methods a preflight is told about (a requested method outside these is added: any method is
# allowed), how long a browser may cache the answer (Chromium caps it at 2 h), and what scripts may
# read beyond the CORS-safelisted response headers.
METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
MAX_AGE_SECS = 600
EXPOSE = (REQUEST_ID,)

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_SCHEME = re.compile(r"[a-z][a-z0-9+\-.]*")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalize_origin(entry: str) -> str | None:
    """The origin a browser would send for `entry` (lower-case scheme and host, no default port, a
    lone trailing slash dropped), or None when `entry` is not an origin (a path, a query, user
    info, a bad port, no host)."""
    text = entry.strip()
    if not text.isascii() or any(c.isspace() or not c.isprintable() for c in text):
        return None
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if (
        not _SCHEME.fullmatch(scheme)
        or not host
        or not text.lower().startswith(f"{scheme}://")
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
        or "?" in text
        or "#" in text
        or "@" in parts.netloc
    ):
        return None
    if ":" in host:  # an IPv6 literal keeps its brackets in an origin
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{host}:{port}"
    return f"{scheme}://{host}"


def _merge_vary(response: web.StreamResponse, names: Iterable[str]) -> None:
    present = [v.strip() for v in response.headers.get(hdrs.VARY, "").split(",") if v.strip()]
    if "*" in present:
        return
    lowered = {v.lower() for v in present}
    added = [n for n in names if n.lower() not in lowered]
    if added:
        response.headers[hdrs.VARY] = ", ".join([*present, *added])


@dataclass(frozen=True)
class Cors:
    """`origins` None: every origin; otherwise exactly these (normalized; possibly none at all,
    when every configured entry was invalid: a restriction that was asked for never opens up)."""

    origins: frozenset[str] | None

    @classmethod
    def from_settings(cls, settings: Settings) -> Cors:
        entries = settings.cors_origins
        if not entries:
            log.info("cors_configured", allowed="any origin")
            return cls(None)
        if "*" in (e.strip() for e in entries):
            log.info("cors_configured", allowed="any origin", detail="--cors-origins lists '*'")
            return cls(None)
        origins = []
        for entry in entries:
            origin = normalize_origin(entry)
            if origin is None:
                log.warning("cors_origin_skipped", entry=entry, detail="not an origin (scheme://host[:port])")
            else:
                origins.append(origin)
        if not origins:
            log.warning(
                "cors_no_valid_origin",
                detail="every --cors-origins entry was skipped: no cross-origin request is allowed",
            )
        log.info("cors_configured", allowed=sorted(set(origins)))
        return cls(frozenset(origins))

    @property
    def restricted(self) -> bool:
        return self.origins is not None

    def allows(self, origin: str) -> bool:
        return self.origins is None or origin.lower() in self.origins

    def allow_origin(self, origin: str) -> str:
        """Access-Control-Allow-Origin for an allowed `origin`."""
        return "*" if self.origins is None else origin

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get(hdrs.ORIGIN)
        method = request.headers.get(hdrs.ACCESS_CONTROL_REQUEST_METHOD)
        if request.method != hdrs.METH_OPTIONS or origin is None or method is None:
            return await handler(request)
        if not self.allows(origin):
            raise Forbidden("origin not allowed")
        requested = [
            h.strip() for h in request.headers.get(hdrs.ACCESS_CONTROL_REQUEST_HEADERS, "").split(",")
        ]
        requested = [h for h in requested if h]
        if not _TOKEN.fullmatch(method) or not all(_TOKEN.fullmatch(h) for h in requested):
            raise ValidationFailed("invalid CORS preflight: a requested method or header is not a token")
        methods = list(METHODS)
        if method.upper() not in methods:
            methods.append(method)
        headers = ["Authorization"]
        headers += [h for h in dict.fromkeys(h.lower() for h in requested) if h != "authorization"]
        response = web.Response(status=204)
        response.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = ", ".join(methods)
        response.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = ", ".join(headers)
        response.headers[hdrs.ACCESS_CONTROL_MAX_AGE] = str(MAX_AGE_SECS)
        _merge_vary(response, (hdrs.ACCESS_CONTROL_REQUEST_METHOD, hdrs.ACCESS_CONTROL_REQUEST_HEADERS))
        return response

    async def on_response_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        """Every answer of the app, just before its headers go out (an `on_response_prepare` signal)."""
        if self.restricted:
            _merge_vary(response, (hdrs.ORIGIN,))
        origin = request.headers.get(hdrs.ORIGIN)
        if self.restricted and (origin is None or not self.allows(origin)):
            return
        # Permissive answers carry `*` whether or not the request named an origin, so a cached copy
        # of an answer to a plain request still serves a browser.
        response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = self.allow_origin(origin or "*")
        response.headers[hdrs.ACCESS_CONTROL_EXPOSE_HEADERS] = ", ".join(EXPOSE)
