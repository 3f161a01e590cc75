"""Per-request access for the API's handlers: the authenticated tenant or worker key, the
settings, the database and the lifecycle, and the auth guard each route is wrapped in."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from shared import logs
from shared.config import Settings
from shared.db import audit
from shared.db.database import Database
from shared.db.pool import Pool, is_unavailable
from shared.domain.access import Principal, Role, RoleRequired
from shared.domain.admission import Occupancy
from shared.domain.audit import AuditRecord, Outcome
from shared.domain.errors import DomainError
from shared.domain.visibility import SeenRecently
from shared.domain.worker_keys import WorkerGrant
from shared.runtime.keys import DATABASE, LIFECYCLE, SETTINGS, Lifecycle
from shared.runtime.pushed import PushedQueues
from shared.web.auth import Authenticator
from shared.web.errors import request_id_of, status_of

_log = structlog.get_logger("queueflow.audit")
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


def guard(handler: Handler, auth: str, action: str | None = None, status: int = 200) -> Handler:
    """Wrap `handler` with its route's credential check: a role (viewer, operator, admin) needs a
    tenant credential of at least that role (RoleRequired, 403, below it), 'worker' the worker
    token or a worker key, 'public' nothing. The tenant (a worker key's too) joins the request's
    log context. With `action` (an audited route's operation id; `status` its success status) each
    authenticated request writes one audit entry (`_audited`)."""
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
            return await handler(request)
        tenant = await authenticator.tenant(header, request.remote)
        request[_TENANT] = tenant
        logs.bind(tenant=tenant.id)
        if action is not None:
            return await _audited(request, handler, tenant, needed, action, status)
        if needed is not None:
            tenant.require(needed)
        return await handler(request)

    guarded.__name__ = getattr(handler, "__name__", "guarded")
    return guarded


async def _audited(
    request: web.Request, handler: Handler, caller: Principal, needed: Role | None, action: str, status: int
) -> web.StreamResponse:
    """Run an audited request: its entry (the path's ids as targets) is written by the change's
    transaction (shared/db/audit.py) with `status`; a refused or failed request's, or one whose
    change did not write it, on its own afterwards with the answer's outcome and status. (A
    request without a valid credential is a 401 before this, and has no tenant to log it under.)"""
    entry = AuditRecord.of(
        caller, action, status, list(request.match_info.values()), request_id_of(request), request.remote
    )
    pool = db_of(request).pool
    with audit.recording(entry) as scope:
        try:
            if needed is not None:
                caller.require(needed)
            response = await handler(request)
        except DomainError as err:
            entry.outcome = Outcome.DENIED if isinstance(err, RoleRequired) else Outcome.FAILED
            entry.status = status_of(err)
            await _write_alone(pool, scope)
            raise
        except web.HTTPException as err:  # (aiohttp's own, e.g. a body over --max-body-bytes)
            entry.outcome, entry.status = Outcome.FAILED, err.status
            await _write_alone(pool, scope)
            raise
        except Exception as err:
            entry.outcome, entry.status = Outcome.FAILED, 503 if is_unavailable(err) else 500
            await _write_alone(pool, scope)
            raise
        if not scope.written:
            entry.status = response.status
            if response.status >= 400:
                entry.outcome = Outcome.FAILED
            await audit.write(pool, scope)
        return response


async def _write_alone(pool: Pool, scope: audit.Scope) -> None:
    """A refused or failed request's entry; should it not be written (the database is down), the
    request's own answer still goes out, and the log says so."""
    try:
        await audit.write(pool, scope)
    except Exception as err:
        _log.warning("audit_entry_not_written", action=scope.entry.action, error=str(err))
