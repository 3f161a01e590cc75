"""Flow-control routes for the caller's tenant: a limit key's policy, put, read, listed, deleted."""

from __future__ import annotations

from aiohttp import web

from services.api.context import db_of, tenant_of
from shared import wire
from shared.db import limits
from shared.domain.limits import check_policy, check_policy_key
from shared.web.body import decode, json_response


def _key(request: web.Request) -> str:
    return check_policy_key(request.match_info["key"])


async def put_limit(request: web.Request) -> web.Response:
    key = _key(request)
    body = await decode(request, wire.PutLimitRequest)
    check_policy(body.concurrency, body.rate)
    return json_response(
        await limits.put(db_of(request).pool, tenant_of(request).id, key, body.concurrency, body.rate)
    )


async def get_limit(request: web.Request) -> web.Response:
    return json_response(await limits.get(db_of(request).pool, tenant_of(request).id, _key(request)))


async def list_limits(request: web.Request) -> web.Response:
    return json_response(
        wire.LimitsResponse(limits=await limits.list_policies(db_of(request).pool, tenant_of(request).id))
    )


async def delete_limit(request: web.Request) -> web.Response:
    await limits.delete(db_of(request).pool, tenant_of(request).id, _key(request))
    return web.Response(status=204)
