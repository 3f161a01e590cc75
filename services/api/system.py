"""System routes: stats, tasks, whoami, and the workers that served the tenant (docs/visibility.md)."""

from __future__ import annotations

from aiohttp import web

from services.api.context import db_of, tenant_of
from shared import wire
from shared.db import jobs as jobs_db
from shared.db import visibility, workers
from shared.domain.visibility import MAX_WORKERS_LISTED
from shared.web.body import json_response

# A worker process refreshes its task rows every 10 s; three missed beats and it is gone.
TASK_LIVENESS_SECS = 30.0


async def stats(request: web.Request) -> web.Response:
    return json_response(await jobs_db.tenant_stats(db_of(request).pool, tenant_of(request).id))


async def tasks(request: web.Request) -> web.Response:
    names = await workers.live_tasks(db_of(request).pool, TASK_LIVENESS_SECS)
    return json_response(wire.TasksResponse(tasks=names))


async def whoami(request: web.Request) -> web.Response:
    caller = tenant_of(request)
    return json_response(
        wire.WhoAmIResponse(
            tenant=caller.id,
            access=caller.access,
            role=caller.role.value,
            actor=caller.actor,
            name=caller.name,
        )
    )


async def list_workers(request: web.Request) -> web.Response:
    found = await visibility.tenant_workers(db_of(request).pool, tenant_of(request).id, MAX_WORKERS_LISTED)
    return json_response(wire.WorkersResponse(workers=found))
