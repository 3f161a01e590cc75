"""Queue routes for the caller's tenant: the backlog view, and pause/resume of its claims."""

from __future__ import annotations

from aiohttp import web

from services.api.context import db_of, tenant_of
from services.api.params import queue_in_path
from shared import wire
from shared.db import queues
from shared.web.body import json_response


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
