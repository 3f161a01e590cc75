"""Tenant workflow routes: create, list, get, steps, diagram, cancel, retry, and the SSE stream."""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from aiohttp import web

from services.api.context import tenant_of
from services.api.params import page_from
from services.api.sse import stream_status
from shared import dag, wire
from shared.db import workflows as workflows_db
from shared.db.listing import fetch_page
from shared.db.queries import Q
from shared.domain import TERMINAL_WORKFLOW_STATUSES, WORKFLOW_STATUSES, Conflict, NotFound
from shared.http import decode, json_response
from shared.runtime import RESOURCES

SSE_MAX_SECS = 60 * 60


async def create_workflow(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreateWorkflowRequest)
    wf_id = await workflows_db.create_workflow(request.app[RESOURCES].pool, tenant_of(request).id, body)
    return json_response(wire.CreateWorkflowResponse(workflow_id=wf_id), 201)


async def list_workflows(request: web.Request) -> web.Response:
    page = page_from(request, {"status": ("status", WORKFLOW_STATUSES)})
    result = await fetch_page(request.app[RESOURCES].pool, "workflows", tenant_of(request).id, page, "text")
    return json_response(
        wire.ListWorkflowsResponse(
            workflows=[workflows_db.to_workflow(r) for r in result.rows],
            limit=page.limit,
            offset=page.offset,
            has_more=result.has_more,
            total=result.total,
            next_cursor=result.next_cursor,
        )
    )


async def _workflow_or_404(request: web.Request) -> wire.Workflow:
    wf_id = request.match_info["id"]
    wf = await workflows_db.get_workflow(request.app[RESOURCES].pool, tenant_of(request).id, wf_id)
    if wf is None:
        raise NotFound(f"workflow not found: {wf_id}")
    return wf


async def get_workflow(request: web.Request) -> web.Response:
    return json_response(await _workflow_or_404(request))


async def get_steps(request: web.Request) -> web.Response:
    wf = await _workflow_or_404(request)
    steps = await workflows_db.step_states(request.app[RESOURCES].pool, wf.id)
    return json_response(wire.WorkflowStepStatesResponse(steps=steps))


async def get_diagram(request: web.Request) -> web.Response:
    wf = await _workflow_or_404(request)
    return json_response(wire.WorkflowDiagramResponse(format="mermaid", diagram=dag.mermaid(wf.steps)))  # type: ignore[arg-type]


async def cancel_workflow(request: web.Request) -> web.Response:
    wf_id = request.match_info["id"]
    outcome, status = await workflows_db.cancel_workflow(
        request.app[RESOURCES].pool, tenant_of(request).id, wf_id
    )
    if outcome == "missing":
        raise NotFound(f"workflow not found: {wf_id}")
    if outcome == "conflict":
        raise Conflict(f"workflow is already {status}")
    return web.Response(status=204)


async def retry_workflow(request: web.Request) -> web.Response:
    wf_id = request.match_info["id"]
    outcome, status = await workflows_db.retry_workflow(
        request.app[RESOURCES].pool, tenant_of(request).id, wf_id
    )
    if outcome == "missing":
        raise NotFound(f"workflow not found: {wf_id}")
    if outcome == "conflict":
        raise Conflict(
            f"workflow is {status}; only a failed, partially_failed or cancelled workflow can be retried"
        )
    return web.Response(status=204)


async def workflow_events(request: web.Request) -> web.StreamResponse:
    """One `status` event (a WorkflowEvent) on every workflow or step change, until terminal."""
    res = request.app[RESOURCES]
    tenant = tenant_of(request).id
    wf_id = (await _workflow_or_404(request)).id
    changed = asyncio.Event()
    unsubscribe = res.hub.watch_workflow(wf_id, lambda _payload: changed.set())
    watcher = await res.pool.fetchval(Q.watch_workflow, wf_id, SSE_MAX_SECS + 60)

    async def read() -> tuple[bytes, bool] | None:
        wf = await workflows_db.get_workflow(res.pool, tenant, wf_id)
        if wf is None:
            return None
        event = wire.WorkflowEvent(
            workflow_id=wf.id,
            status=wf.status,
            error_message=wf.error_message,
            steps=await workflows_db.step_states(res.pool, wf.id),
        )
        return msgspec.json.encode(event), wf.status in TERMINAL_WORKFLOW_STATUSES

    try:
        return await stream_status(request, res, changed, read, SSE_MAX_SECS)
    finally:
        unsubscribe()
        with contextlib.suppress(Exception):
            await res.pool.execute(Q.unwatch_workflow, watcher)
