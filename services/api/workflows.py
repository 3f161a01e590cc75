"""Tenant workflow routes: create, list, get, steps, diagram, cancel, retry, and the SSE stream."""

from __future__ import annotations

import functools

import msgspec
from aiohttp import web

from services.api.context import act_on, db_of, lifecycle_of, path_id, settings_of, streams_of, tenant_of
from services.api.params import list_query, trace_headers
from services.api.sse import stream_status
from shared import wire
from shared.db import watchers
from shared.db import workflows as workflows_db
from shared.db.database import Database
from shared.domain.errors import NotFound
from shared.domain.workflows import WorkflowStatus, mermaid
from shared.runtime import advance
from shared.web.body import decode, json_response

SSE_MAX_SECS = 60 * 60


async def create_workflow(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreateWorkflowRequest)
    settings = settings_of(request)
    body.check_sizes(settings.max_payload_bytes)
    db = db_of(request)
    wf_id, status = await advance.create_workflow(
        db.pool,
        tenant_of(request).id,
        body,
        settings.default_queue,
        trace_headers(request),
        db.tracer,
        limits=settings.workflow_limits,
    )
    return json_response(wire.CreateWorkflowResponse(workflow_id=wf_id, status=status), 201)


async def list_workflows(request: web.Request) -> web.Response:
    query = list_query(request, WorkflowStatus)
    found = await workflows_db.list_workflows(db_of(request).pool, tenant_of(request).id, query)
    return json_response(wire.ListWorkflowsResponse.of(query.page, found))


async def _workflow(request: web.Request) -> wire.Workflow:
    return await workflows_db.get_workflow(
        db_of(request).pool, tenant_of(request).id, request.match_info["id"]
    )


async def get_workflow(request: web.Request) -> web.Response:
    return json_response(await _workflow(request))


async def get_steps(request: web.Request) -> web.Response:
    wf = await _workflow(request)
    steps = await workflows_db.step_states(db_of(request).pool, wf.id)
    return json_response(wire.WorkflowStepStatesResponse(steps=steps))


async def get_diagram(request: web.Request) -> web.Response:
    wf = await _workflow(request)
    return json_response(wire.WorkflowDiagramResponse(format="mermaid", diagram=mermaid(wf.steps)))


cancel_workflow = act_on(workflows_db.cancel_workflow)


async def retry_workflow(request: web.Request) -> web.Response:
    limits = settings_of(request).workflow_limits
    await workflows_db.retry_workflow(db_of(request).pool, tenant_of(request).id, path_id(request), limits)
    return web.Response(status=204)


async def workflow_events(request: web.Request) -> web.StreamResponse:
    """One `status` event (a WorkflowEvent) on every workflow or step change, until terminal."""
    db = db_of(request)
    tenant = tenant_of(request).id
    with streams_of(request).held(tenant):  # past the caps: 429 or 503, before any query
        return await _workflow_events(request, db, tenant)


async def _workflow_events(request: web.Request, db: Database, tenant: str) -> web.StreamResponse:
    wf_id = (await _workflow(request)).id

    async def read() -> tuple[bytes, bool] | None:
        try:
            wf = await workflows_db.get_workflow(db.pool, tenant, wf_id)
        except NotFound:
            return None
        steps = await workflows_db.step_states(db.pool, wf.id)
        event = wire.WorkflowEvent(
            workflow_id=wf.id, status=wf.status, error_message=wf.error_message, steps=steps
        )
        return msgspec.json.encode(event), wf.status.terminal

    async with watchers.watching_workflow(db.pool, wf_id, SSE_MAX_SECS + 60):
        subscribe = functools.partial(db.hub.watch_workflow, wf_id)
        return await stream_status(request, lifecycle_of(request), subscribe, read, SSE_MAX_SECS)
