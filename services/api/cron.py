"""Tenant cron routes: create, list, get, delete, pause, resume. Firing is the janitor's."""

from __future__ import annotations

from aiohttp import web

from services.api.context import act_on, db_of, settings_of, tenant_of
from services.api.params import list_query
from shared import wire
from shared.db import crons
from shared.web.body import decode, json_response


async def create_cron(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreateCronRequest)
    body.check_sizes(settings_of(request).max_payload_bytes)
    cron_id = await crons.create(
        db_of(request).pool,
        tenant_of(request).id,
        name=body.name,
        cron_expr=body.cron_expr,
        task_name=body.task_name,
        payload=body.payload,
        queue=body.queue,
        config=body.config,
        timezone=body.timezone,
        workflow=body.workflow,
        limits=settings_of(request).workflow_limits,
    )
    return json_response(wire.CreateCronResponse(cron_id=cron_id), 201)


async def list_crons(request: web.Request) -> web.Response:
    query = list_query(request)
    found = await crons.list_crons(db_of(request).pool, tenant_of(request).id, query)
    return json_response(wire.ListCronsResponse.of(query.page, found))


async def get_cron(request: web.Request) -> web.Response:
    return json_response(
        await crons.get(db_of(request).pool, tenant_of(request).id, request.match_info["id"])
    )


delete_cron = act_on(crons.delete)


pause_cron = act_on(crons.pause)


resume_cron = act_on(crons.resume)
