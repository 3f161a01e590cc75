"""Tenant workflow routes: create, list, get, steps, diagram, cancel, retry, and the SSE stream."""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from aiohttp import web

from services.api.context import tenant_of
from services.api.params import page_from
from shared import dag, wire
from shared.db import workflows as workflows_db
from shared.db.listing import fetch_page
from shared.db.queries import Q
from shared.domain import TERMINAL_WORKFLOW_STATUSES, WORKFLOW_STATUSES, Conflict, NotFound
from shared.http import decode, json_response
from shared.runtime import RESOURCES

SSE_MAX_SECS = 60 * 60
SSE_KEEPALIVE_SECS = 15.0


async def create_workflow(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreateWorkflowRequest)
    wf_id = await workflows_db.create_workflow(request.app[RESOURCES].pool, tenant_of(request).id, body)
    return json_response(wire.CreateWorkflowResponse(workflow_id=wf_id), 201)


async def list_workflows(request: web.Request) -> web.Response:
    page = page_from(request, {"status": ("status", WORKFLOW_STATUSES)})
    result = await fetch_page(request.app[RESOURCES].pool, "workflows", tenant_of(request).id, page, "text")
    return json_response(wire.ListWorkflowsResponse(
        workflows=[workflows_db.to_workflow(r) for r in result.rows], limit=page.limit, offset=page.offset,
        has_more=result.has_more, total=result.total, next_cursor=result.next_cursor))


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
    outcome, status = await workflows_db.cancel_workflow(request.app[RESOURCES].pool, tenant_of(request).id, wf_id)
    if outcome == "missing":
        raise NotFound(f"workflow not found: {wf_id}")
    if outcome == "conflict":
        raise Conflict(f"workflow is already {status}")
    return web.Response(status=204)


async def retry_workflow(request: web.Request) -> web.Response:
    wf_id = request.match_info["id"]
    outcome, status = await workflows_db.retry_workflow(request.app[RESOURCES].pool, tenant_of(request).id, wf_id)
    if outcome == "missing":
        raise NotFound(f"workflow not found: {wf_id}")
    if outcome == "conflict":
        raise Conflict(f"workflow is {status}; only a failed, partially_failed or cancelled workflow can be retried")
    return web.Response(status=204)


async def workflow_events(request: web.Request) -> web.StreamResponse:
    """One `status` event (a WorkflowEvent) on every workflow or step change, until terminal."""
    res = request.app[RESOURCES]
    tenant = tenant_of(request).id
    wf = await _workflow_or_404(request)
    changed = asyncio.Event()
    unsubscribe = res.hub.watch_workflow(wf.id, lambda _payload: changed.set())
    watcher = await res.pool.fetchval(Q.watch_workflow, wf.id, SSE_MAX_SECS + 60)
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SSE_MAX_SECS
    last: bytes | None = None
    try:
        current: wire.Workflow | None = await workflows_db.get_workflow(res.pool, tenant, wf.id)
        while current is not None:
            event = wire.WorkflowEvent(workflow_id=current.id, status=current.status,
                                       steps=await workflows_db.step_states(res.pool, current.id),
                                       error_message=current.error_message)
            data = msgspec.json.encode(event)
            if data != last:
                await response.write(b"event: status\ndata: " + data + b"\n\n")
                last = data
            if current.status in TERMINAL_WORKFLOW_STATUSES or loop.time() >= deadline or res.draining:
                break
            try:
                async with asyncio.timeout(min(SSE_KEEPALIVE_SECS, deadline - loop.time())):
                    await changed.wait()
            except TimeoutError:
                await response.write(b": keep-alive\n\n")
            changed.clear()
            current = await workflows_db.get_workflow(res.pool, tenant, wf.id)
    except ConnectionResetError:
        pass
    finally:
        unsubscribe()
        with contextlib.suppress(Exception):
            await res.pool.execute(Q.unwatch_workflow, watcher)
    with contextlib.suppress(ConnectionResetError):
        await response.write_eof()
    return response
