"""Tenant cron routes: create, list, get, delete, pause, resume. Firing is the janitor's."""

from __future__ import annotations

from aiohttp import web

from services.api.context import tenant_of
from services.api.params import page_from
from shared import wire
from shared.db import crons
from shared.db.listing import fetch_page
from shared.domain import Conflict, NotFound, ValidationFailed
from shared.http import decode, json_response
from shared.runtime import RESOURCES


async def create_cron(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreateCronRequest)
    if not body.task_name.strip():
        raise ValidationFailed("task_name is required")
    cron_id = await crons.create(request.app[RESOURCES].pool, tenant_of(request).id, body)
    if cron_id is None:
        raise Conflict(f"a cron schedule named '{body.name}' already exists")
    return json_response(wire.CreateCronResponse(cron_id=cron_id), 201)


async def list_crons(request: web.Request) -> web.Response:
    page = page_from(request, {})
    result = await fetch_page(
        request.app[RESOURCES].pool, "cron_schedules", tenant_of(request).id, page, "text"
    )
    return json_response(
        wire.ListCronsResponse(
            crons=[crons.to_cron(r) for r in result.rows],
            limit=page.limit,
            offset=page.offset,
            has_more=result.has_more,
            total=result.total,
            next_cursor=result.next_cursor,
        )
    )


async def get_cron(request: web.Request) -> web.Response:
    cron_id = request.match_info["id"]
    schedule = await crons.get(request.app[RESOURCES].pool, tenant_of(request).id, cron_id)
    if schedule is None:
        raise NotFound(f"cron schedule not found: {cron_id}")
    return json_response(schedule)


async def delete_cron(request: web.Request) -> web.Response:
    cron_id = request.match_info["id"]
    if not await crons.delete(request.app[RESOURCES].pool, tenant_of(request).id, cron_id):
        raise NotFound(f"cron schedule not found: {cron_id}")
    return web.Response(status=204)


async def pause_cron(request: web.Request) -> web.Response:
    cron_id = request.match_info["id"]
    if not await crons.pause(request.app[RESOURCES].pool, tenant_of(request).id, cron_id):
        raise NotFound(f"cron schedule not found: {cron_id}")
    return web.Response(status=204)


async def resume_cron(request: web.Request) -> web.Response:
    cron_id = request.match_info["id"]
    if not await crons.resume(request.app[RESOURCES].pool, tenant_of(request).id, cron_id):
        raise NotFound(f"cron schedule not found: {cron_id}")
    return web.Response(status=204)
