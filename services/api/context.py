"""Per-request access for the API's handlers: the authenticated tenant or worker key, the
settings, the database and the lifecycle, and the auth guard each route is wrapped in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from shared import logs
from shared.config import Settings
from shared.db.database import Database
from shared.db.pool import Pool
from shared.domain.access import Principal, Role
from shared.domain.admission import Occupancy
from shared.domain.visibility import SeenRecently
from shared.domain.worker_keys import WorkerGrant
from shared.runtime.keys import DATABASE, LIFECYCLE, SETTINGS, Lifecycle
from shared.runtime.pushed import PushedQueues
from shared.web.auth import Authenticator

AUTH = web.AppKey("authenticator", Authenticator)
SEEN = web.AppKey("workers_seen", SeenRecently)
STREAMS = web.AppKey("streams", Occupancy)  # open SSE streams, by tenant
LONG_POLLS = web.AppKey("long_polls", Occupancy)  # parked lease long-polls, by worker key's tenant
PUSHED = web.AppKey("pushed_queues", PushedQueues)  # the queues drained by push (a lease is a 409)
_TENANT = web.RequestKey("tenant", Principal)
# Set on every worker route, None for the worker token (so reading it never takes a KeyError).
_WORKER_KEY: web.RequestKey[WorkerGrant | None] = web.RequestKey("worker_key")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def tenant_of(request: web.Request) -> Principal:
    """The caller of a tenant route: its tenant (`.id`), role and actor."""
    return request[_TENANT]


def worker_key_of(request: web.Request) -> WorkerGrant | None:
    """On a worker route: the worker key's grant, or None for the worker token (every tenant)."""
    return request.get(_WORKER_KEY)


def settings_of(request: web.Request) -> Settings:
    return request.app[SETTINGS]


def db_of(request: web.Request) -> Database:
    return request.app[DATABASE]


def lifecycle_of(request: web.Request) -> Lifecycle:
    return request.app[LIFECYCLE]


def workers_seen_of(request: web.Request) -> SeenRecently:
    """Which lease calls this api process records in the worker registry."""
    return request.app[SEEN]


def streams_of(request: web.Request) -> Occupancy:
    return request.app[STREAMS]


def long_polls_of(request: web.Request) -> Occupancy:
    return request.app[LONG_POLLS]


def pushed_of(request: web.Request) -> PushedQueues:
    return request.app[PUSHED]


def path_id(request: web.Request) -> str:
    return request.match_info["id"]


def act_on(
    action: Callable[[Pool, str, Any], Awaitable[object]], parse_id: Callable[[web.Request], Any] = path_id
) -> Handler:
    """A handler that applies `action(pool, tenant, id)` to the resource named in the path and
    answers 204 (the action raises NotFound or Conflict itself)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await action(db_of(request).pool, tenant_of(request).id, parse_id(request))
        return web.Response(status=204)

    handler.__name__ = getattr(action, "__name__", "act_on")
    return handler


def guard(handler: Handler, auth: str) -> Handler:
    """Wrap `handler` with its route's credential check: a role (viewer, operator, admin) needs a
    tenant credential of at least that role (RoleRequired, 403, below it), 'worker' the worker
    token or a worker key, 'public' nothing. The tenant (a worker key's too) joins the request's
    log context."""
    if auth == "public":
        return handler
    needed = None if auth == "worker" else Role(auth)

    async def guarded(request: web.Request) -> web.StreamResponse:
        authenticator = request.app[AUTH]
        header = request.headers.get("Authorization")
        # (the peer's address: whose unknown worker keys are rate-limited)
        if auth == "worker":
            grant = await authenticator.worker(header, request.remote)
            request[_WORKER_KEY] = grant
            if grant is not None:
                logs.bind(tenant=grant.tenant, worker_key=str(grant.key_id))
        else:
            tenant = await authenticator.tenant(header, request.remote)
            request[_TENANT] = tenant
            logs.bind(tenant=tenant.id)
            if needed is not None:
                tenant.require(needed)
        return await handler(request)

    guarded.__name__ = getattr(handler, "__name__", "guarded")
    return guarded
