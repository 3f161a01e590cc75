"""System routes: stats, tasks, whoami."""

from __future__ import annotations

from aiohttp import web

from services.api.context import tenant_of
from shared import wire
from shared.db import jobs as jobs_db
from shared.db.queries import Q
from shared.http import json_response
from shared.runtime import RESOURCES

# A worker process refreshes its task rows every 10 s; three missed beats and it is gone.
TASK_LIVENESS_SECS = 30.0


async def stats(request: web.Request) -> web.Response:
    return json_response(await jobs_db.tenant_stats(request.app[RESOURCES].pool, tenant_of(request).id))


async def tasks(request: web.Request) -> web.Response:
    rows = await request.app[RESOURCES].pool.fetch(Q.live_tasks, TASK_LIVENESS_SECS)
    return json_response(wire.TasksResponse(tasks=[r["task_name"] for r in rows]))


async def whoami(request: web.Request) -> web.Response:
    tenant = tenant_of(request)
    return json_response(wire.WhoAmIResponse(tenant=tenant.id, access=tenant.access))  # type: ignore[arg-type]
