"""Tenant routes for push endpoints (docs/push.md): create (its secret is in that answer only),
list, read, change (pause, resume), remove, rotate the secret, and the recent deliveries. Another
tenant's endpoint is not found."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from aiohttp import web

from services.api.context import db_of, pushed_of, settings_of, tenant_of
from services.api.params import clamped_int, id_in_path
from shared import wire
from shared.db import push as push_db
from shared.domain.push import PushEndpoint, check_rotation_grace, grace_until, new_secret
from shared.runtime.push_net import judge_at_creation
from shared.web.body import decode, json_response

RECENT_DELIVERIES = 50
MAX_DELIVERIES = 500


def _endpoint_id(request: web.Request) -> uuid.UUID:
    return id_in_path(request, "push endpoint")


def _with_secret(endpoint: PushEndpoint, secret: str) -> wire.PushEndpointWithSecret:
    fields = {f: getattr(endpoint, f) for f in endpoint.__struct_fields__}
    return wire.PushEndpointWithSecret(**fields, secret=secret)


async def create_push_endpoint(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreatePushEndpointRequest)
    allowed = settings_of(request).push_allowed
    new = body.to_new_endpoint(allowed)
    await judge_at_creation(new.url, allowed)
    secret = new_secret()
    endpoint = await push_db.create(db_of(request).pool, tenant_of(request).id, new, secret)
    pushed_of(request).forget()
    return json_response(_with_secret(endpoint, secret), 201)


async def list_push_endpoints(request: web.Request) -> web.Response:
    found = await push_db.list_endpoints(db_of(request).pool, tenant_of(request).id)
    return json_response(wire.ListPushEndpointsResponse(push_endpoints=found))


async def get_push_endpoint(request: web.Request) -> web.Response:
    return json_response(await push_db.get(db_of(request).pool, tenant_of(request).id, _endpoint_id(request)))


async def update_push_endpoint(request: web.Request) -> web.Response:
    endpoint_id = _endpoint_id(request)
    body = await decode(request, wire.UpdatePushEndpointRequest)
    allowed = settings_of(request).push_allowed
    change = body.to_change(allowed)
    if change.url is not None:
        await judge_at_creation(change.url, allowed)
    endpoint = await push_db.update(db_of(request).pool, tenant_of(request).id, endpoint_id, change)
    pushed_of(request).forget()
    return json_response(endpoint)


async def delete_push_endpoint(request: web.Request) -> web.Response:
    await push_db.delete(db_of(request).pool, tenant_of(request).id, _endpoint_id(request))
    pushed_of(request).forget()
    return web.Response(status=204)


async def rotate_push_secret(request: web.Request) -> web.Response:
    endpoint_id = _endpoint_id(request)
    body = await decode(request, wire.RotatePushSecretRequest)
    grace = check_rotation_grace(body.grace_secs)
    secret = new_secret()
    until = grace_until(datetime.now(UTC), grace)
    endpoint = await push_db.rotate_secret(
        db_of(request).pool, tenant_of(request).id, endpoint_id, secret, until
    )
    return json_response(_with_secret(endpoint, secret))


async def list_push_deliveries(request: web.Request) -> web.Response:
    endpoint_id = _endpoint_id(request)
    limit = clamped_int(request, "limit", RECENT_DELIVERIES, 1, MAX_DELIVERIES)
    found = await push_db.recent_deliveries(db_of(request).pool, tenant_of(request).id, endpoint_id, limit)
    return json_response(wire.PushDeliveriesResponse(deliveries=found))
