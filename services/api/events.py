"""Event routes for the caller's tenant (issue 15): post an event for the workflow steps waiting for
its key, and list the kept events."""

from __future__ import annotations

from aiohttp import web

from services.api.context import db_of, settings_of, tenant_of
from shared import wire
from shared.db import events
from shared.domain.errors import ValidationFailed
from shared.web.body import decode, json_response

MAX_LIST = 100


async def post_event(request: web.Request) -> web.Response:
    body = await decode(request, wire.PostEventRequest)
    event_id, delivered = await events.post_event(
        db_of(request).pool,
        tenant_of(request).id,
        body.checked_key(),
        body.payload or {},
        settings_of(request).event_retention_secs,
    )
    return json_response(wire.PostEventResponse(event_id=str(event_id), delivered=delivered), 202)


async def list_events(request: web.Request) -> web.Response:
    key = request.query.get("key") or None
    if key is not None and "\x00" in key:
        raise ValidationFailed("key must not contain NUL")
    raw = request.query.get("limit", "50")
    try:
        asked = int(raw)
    except ValueError:
        raise ValidationFailed(f"limit must be an integer, not {raw!r}") from None
    if not -(2**63) <= asked < 2**63:
        raise ValidationFailed(f"limit must be a 64-bit integer, not {raw!r}")
    limit = min(MAX_LIST, max(1, asked))
    found = await events.list_events(db_of(request).pool, tenant_of(request).id, key, limit)
    return json_response(wire.ListEventsResponse(events=found))
