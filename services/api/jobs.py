"""Tenant job routes: create, batch, list, get, cancel (one or by filter), and the SSE stream."""

from __future__ import annotations

import asyncio
import contextlib

import msgspec
from aiohttp import web

from services.api.context import settings_of, tenant_of
from services.api.params import page_from
from services.api.sse import stream_status
from shared import wire
from shared.db import jobs as jobs_db
from shared.db.listing import fetch_page
from shared.db.queries import Q
from shared.domain import (
    ACTIVE_JOB_STATUSES,
    JOB_STATUSES,
    TERMINAL_JOB_STATUSES,
    Conflict,
    NotFound,
    ValidationFailed,
    instant,
    is_utf8,
)
from shared.http import decode, json_response
from shared.runtime import RESOURCES

SSE_MAX_SECS = 15 * 60


def _new_job(item: wire.CreateJobRequest, default_queue: str, key: str | None) -> jobs_db.NewJob:
    if not item.task_name.strip():
        raise ValidationFailed("task_name is required")
    config = item.config or wire.JobConfigRequest()
    run_at = instant("run_at", item.run_at)
    return jobs_db.NewJob(
        task_name=item.task_name,
        queue=config.queue or default_queue,
        config=config.resolve(),
        payload=item.payload or {},
        run_at=run_at,
        metadata=item.metadata or {},
        idempotency_key=key,
    )


def _header_key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key", "").strip()
    if len(key) > 255:
        raise ValidationFailed("Idempotency-Key is longer than 255 characters")
    if not key.isprintable() or not is_utf8(key):
        raise ValidationFailed("Idempotency-Key must be printable UTF-8 text")
    return key or None


async def create_job(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreateJobRequest)
    key = _header_key(request) or (body.idempotency_key or "").strip() or None
    job = _new_job(body, settings_of(request).default_queue, key)
    job_id = await request.app[RESOURCES].inserter.insert(tenant_of(request).id, job)
    return json_response(wire.CreateJobResponse(job_id=job_id), 201)


async def create_batch(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreateBatchJobsRequest)
    settings = settings_of(request)
    if not body.jobs:
        raise ValidationFailed("jobs array cannot be empty")
    if len(body.jobs) > settings.max_batch:
        raise ValidationFailed(f"batch size cannot exceed {settings.max_batch}")
    items = []
    for index, item in enumerate(body.jobs):
        try:
            items.append(_new_job(item, settings.default_queue, (item.idempotency_key or "").strip() or None))
        except ValidationFailed as err:
            raise ValidationFailed(
                f"jobs[{index}]: {err.message.removeprefix('validation error: ')}"
            ) from None
    ids = await jobs_db.insert_jobs(request.app[RESOURCES].pool, tenant_of(request).id, items)
    return json_response(wire.CreateBatchJobsResponse(job_ids=ids, count=len(ids)), 201)


async def list_jobs(request: web.Request) -> web.Response:
    page = page_from(
        request,
        {
            "status": ("status", JOB_STATUSES),
            "queue": ("queue_name", None),
            "task_name": ("task_name", None),
        },
    )
    result = await fetch_page(request.app[RESOURCES].pool, "jobs", tenant_of(request).id, page, "uuid")
    return json_response(
        wire.ListJobsResponse(
            jobs=[jobs_db.to_job(r) for r in result.rows],
            limit=page.limit,
            offset=page.offset,
            has_more=result.has_more,
            total=result.total,
            next_cursor=result.next_cursor,
        )
    )


async def _job_or_404(request: web.Request) -> wire.Job:
    job_id = request.match_info["id"]
    job = await jobs_db.get_job(request.app[RESOURCES].pool, tenant_of(request).id, job_id)
    if job is None:
        raise NotFound(f"job not found: {job_id}")
    return job


async def get_job(request: web.Request) -> web.Response:
    return json_response(await _job_or_404(request))


async def cancel_job(request: web.Request) -> web.Response:
    job_id = request.match_info["id"]
    outcome, status = await jobs_db.cancel_job(request.app[RESOURCES].pool, tenant_of(request).id, job_id)
    if outcome == "missing":
        raise NotFound(f"job not found: {job_id}")
    if outcome == "conflict":
        raise Conflict(f"job is already {status}")
    return web.Response(status=204)


async def cancel_jobs(request: web.Request) -> web.Response:
    body = await decode(request, wire.CancelJobsRequest)
    limit = body.limit or 100
    max_batch = settings_of(request).max_batch
    if limit > max_batch:
        raise ValidationFailed(f"limit cannot exceed {max_batch}")
    statuses = [body.status] if body.status else list(ACTIVE_JOB_STATUSES)
    count = await jobs_db.cancel_matching(
        request.app[RESOURCES].pool,
        tenant_of(request).id,
        statuses,
        body.queue,
        body.task_name,
        instant("created_after", body.created_after),
        instant("created_before", body.created_before),
        limit,
    )
    return json_response(wire.CancelJobsResponse(cancelled=count))


async def job_events(request: web.Request) -> web.StreamResponse:
    """`status` events carrying the whole job, one per change (a job's JSON changes only with its
    status), until a terminal status."""
    res = request.app[RESOURCES]
    tenant = tenant_of(request).id
    job_id = (await _job_or_404(request)).id
    changed = asyncio.Event()
    unsubscribe = res.hub.watch_job(job_id, lambda _status: changed.set())
    watcher = await res.pool.fetchval(Q.watch_job, jobs_db.parse_id(job_id), SSE_MAX_SECS + 60)

    async def read() -> tuple[bytes, bool] | None:
        job = await jobs_db.get_job(res.pool, tenant, job_id)
        return None if job is None else (msgspec.json.encode(job), job.status in TERMINAL_JOB_STATUSES)

    try:
        return await stream_status(request, res, changed, read, SSE_MAX_SECS)
    finally:
        unsubscribe()
        with contextlib.suppress(Exception):
            await res.pool.execute(Q.unwatch_job, watcher)
