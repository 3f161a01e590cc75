"""Queue routes for the caller's tenant: the backlog view, and pause/resume of its claims."""

from __future__ import annotations

import math

from aiohttp import web

from services.api.context import tenant_of
from services.api.params import queue_in_path
from shared import wire
from shared.db.queries import Q
from shared.http import json_response
from shared.runtime import RESOURCES


async def list_queues(request: web.Request) -> web.Response:
    rows = await request.app[RESOURCES].pool.fetch(Q.tenant_queue_stats, tenant_of(request).id)
    return json_response(
        wire.QueuesResponse(
            queues=[
                wire.QueueStats(
                    queue=r["queue_name"],
                    pending=r["pending"],
                    scheduled=r["scheduled"],
                    running=r["running"],
                    paused=r["paused"],
                    oldest_pending_age_secs=None if r["oldest_age"] is None else math.floor(r["oldest_age"]),
                )
                for r in rows
            ]
        )
    )


async def _set_paused(request: web.Request, paused: bool) -> web.Response:
    queue = queue_in_path(request)
    tenant = tenant_of(request).id
    pool = request.app[RESOURCES].pool
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(Q.set_queue_paused, queue, tenant, paused)
        if not paused:
            await conn.execute(Q.wake_queue, queue)  # parked workers claim at once (on commit)
        counts = await conn.fetchrow(Q.tenant_queue_counts, tenant, queue)
    return json_response(
        wire.QueueControlResponse(
            queue=queue, paused=paused, pending=counts["pending"], running=counts["running"]
        )
    )


async def pause_queue(request: web.Request) -> web.Response:
    return await _set_paused(request, True)


async def resume_queue(request: web.Request) -> web.Response:
    return await _set_paused(request, False)
