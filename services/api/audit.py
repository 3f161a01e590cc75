"""The audit log's route: a page of the caller's tenant's entries (docs/access.md, "The audit log")."""

from __future__ import annotations

import msgspec
from aiohttp import web

from services.api.context import db_of, tenant_of
from services.api.params import page_of, parse_time
from shared import wire
from shared.db import audit
from shared.domain.audit import AuditQuery
from shared.web.body import json_response


async def list_audit(request: web.Request) -> web.Response:
    q = request.query
    page = page_of(request)
    if q.get("since"):
        page = msgspec.structs.replace(page, created_after=parse_time("since", q["since"]))
    if q.get("until"):
        page = msgspec.structs.replace(page, created_before=parse_time("until", q["until"]))
    query = AuditQuery(
        page=page,
        actor=q.get("actor") or None,
        action=q.get("action") or None,
        target=q.get("target") or None,
    )
    found = await audit.list_entries(db_of(request).pool, tenant_of(request).id, query)
    return json_response(wire.ListAuditResponse.of(page, found))
