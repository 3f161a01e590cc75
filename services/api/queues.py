"""Queue routes for the caller's tenant: the backlog view, pause/resume of its claims, and one
queue's settings (what becomes of its completed jobs: docs/operations.md, "Retention")."""

from __future__ import annotations

from aiohttp import web

from services.api.context import db_of, tenant_of
from services.api.params import queue_in_path
from shared import wire
from shared.db import queues
from shared.web.body import decode, json_response


async def list_queues(request: web.Request) -> web.Response:
    found = await queues.tenant_queues(db_of(request).pool, tenant_of(request).id)
    return json_response(wire.QueuesResponse(queues=found))


async def pause_queue(request: web.Request) -> web.Response:
    queue = queue_in_path(request)
    return json_response(
        await queues.set_paused(db_of(request).pool, tenant_of(request).id, queue, paused=True)
    )


async def resume_queue(request: web.Request) -> web.Response:
    queue = queue_in_path(request)
    return json_response(
        await queues.set_paused(db_of(request).pool, tenant_of(request).id, queue, paused=False)
    )


async def get_queue(request: web.Request) -> web.Response:
    queue = queue_in_path(request)
    return json_response(await queues.tenant_queue(db_of(request).pool, tenant_of(request).id, queue))


async def update_queue(request: web.Request) -> web.Response:
    """Change what the body names (a field left out stays as it is) and answer the queue."""
    queue = queue_in_path(request)
    body = await decode(request, wire.UpdateQueueRequest)
    db, tenant = db_of(request), tenant_of(request).id
    if body.retention is None:
        return json_response(await queues.tenant_queue(db.pool, tenant, queue))
    return json_response(await queues.set_retention(db.pool, tenant, queue, body.retention))
