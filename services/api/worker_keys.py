"""Tenant routes for worker keys: mint (the token is in that answer only), list, revoke."""

from __future__ import annotations

from datetime import UTC, datetime

from aiohttp import web

from services.api.context import AUTH, db_of, tenant_of
from services.api.params import worker_key_id_in_path
from shared import wire
from shared.db import worker_keys
from shared.domain.worker_keys import new_token, token_digest
from shared.web.body import decode, json_response


async def create_worker_key(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreateWorkerKeyRequest)
    token = new_token()
    key = await worker_keys.create(
        db_of(request).pool, tenant_of(request).id, body.to_new_key(datetime.now(UTC)), token_digest(token)
    )
    return json_response(
        wire.CreateWorkerKeyResponse(
            id=key.id,
            name=key.name,
            queues=key.queues,
            created_at=key.created_at,
            expires_at=key.expires_at,
            token=token,
        ),
        201,
    )


async def list_worker_keys(request: web.Request) -> web.Response:
    found = await worker_keys.list_keys(db_of(request).pool, tenant_of(request).id)
    return json_response(wire.ListWorkerKeysResponse(worker_keys=found))


async def delete_worker_key(request: web.Request) -> web.Response:
    """Revoke a key. This process drops it now; the others when the revocation's notification
    reaches them."""
    key_id = worker_key_id_in_path(request)
    await worker_keys.delete(db_of(request).pool, tenant_of(request).id, key_id)
    cache = request.app[AUTH].worker_keys
    if cache is not None:
        cache.forget(str(key_id))
    return web.Response(status=204)
