"""Per-request access: the authenticated tenant, the settings, and the auth guards for routes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from shared.auth import Authenticator, Tenant
from shared.config import Settings
from shared.domain import Forbidden
from shared.runtime import RESOURCES

AUTH = web.AppKey("authenticator", Authenticator)
_TENANT = web.RequestKey("tenant", Tenant)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def tenant_of(request: web.Request) -> Tenant:
    tenant: Tenant = request[_TENANT]
    return tenant


def settings_of(request: web.Request) -> Settings:
    return request.app[RESOURCES].settings


def guard(handler: Handler, auth: str) -> Handler:
    """Wrap `handler` with its route's credential check: 'read' and 'write' need a tenant
    credential (a read-only one may not write), 'worker' the worker token, 'public' nothing."""
    if auth == "public":
        return handler

    async def guarded(request: web.Request) -> web.StreamResponse:
        authenticator = request.app[AUTH]
        header = request.headers.get("Authorization")
        if auth == "worker":
            authenticator.worker(header)
        else:
            tenant = authenticator.tenant(header)
            if auth == "write" and tenant.read_only:
                raise Forbidden("access denied: read-only credential")
            request[_TENANT] = tenant
        return await handler(request)

    guarded.__name__ = getattr(handler, "__name__", "guarded")
    return guarded
