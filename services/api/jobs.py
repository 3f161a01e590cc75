"""Tenant job routes: create, batch, list, get, cancel (one or by filter), the SSE stream, and a
job's logs and attempts (docs/visibility.md)."""

from __future__ import annotations

import functools

import msgspec
from aiohttp import web

from services.api.context import act_on, db_of, lifecycle_of, settings_of, streams_of, tenant_of
from services.api.params import clamped_int, job_id_in_path, list_query, non_negative_int, trace_headers
from services.api.sse import Event, stream_events
from shared import wire
from shared.db import jobs as jobs_db
from shared.db import visibility, watchers
from shared.db.database import Database
from shared.domain.errors import NotFound, ValidationFailed
from shared.domain.jobs import JobStatus
from shared.domain.visibility import DEFAULT_LOG_PAGE, MAX_LOG_PAGE
from shared.runtime.enqueue import enqueue_many, enqueue_one
from shared.web.body import decode, is_utf8, json_response

SSE_MAX_SECS = 15 * 60


def _header_key(request: web.Request) -> str | None:
    key = request.headers.get("Idempotency-Key", "").strip()
    if len(key) > 255:
        raise ValidationFailed("Idempotency-Key is longer than 255 characters")
    if not key.isprintable() or not is_utf8(key):
        raise ValidationFailed("Idempotency-Key must be printable UTF-8 text")
    return key or None


async def create_job(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreateJobRequest)
    settings = settings_of(request)
    body.check_sizes(settings.max_payload_bytes)
    key = _header_key(request) or (body.idempotency_key or "").strip() or None
    job = body.to_new_job(settings.default_queue, key, lingers=True)
    job_id = await enqueue_one(db_of(request), tenant_of(request).id, job, trace_headers(request))
    return json_response(wire.CreateJobResponse(job_id=str(job_id)), 201)


async def create_batch(request: web.Request) -> web.Response:
    body = await decode(request, wire.CreateBatchJobsRequest)
    settings = settings_of(request)
    if not body.jobs:
        raise ValidationFailed("jobs array cannot be empty")
    if len(body.jobs) > settings.max_batch:
        raise ValidationFailed(f"batch size cannot exceed {settings.max_batch}")
    body.check_sizes(settings.max_payload_bytes)
    items = []
    for index, item in enumerate(body.jobs):
        try:
            items.append(
                item.to_new_job(settings.default_queue, (item.idempotency_key or "").strip() or None)
            )
        except ValidationFailed as err:
            raise ValidationFailed(
                f"jobs[{index}]: {err.message.removeprefix('validation error: ')}"
            ) from None
    inserted = await enqueue_many(db_of(request), tenant_of(request).id, items, trace_headers(request))
    return json_response(wire.CreateBatchJobsResponse(job_ids=inserted, count=len(inserted)), 201)


async def list_jobs(request: web.Request) -> web.Response:
    query = list_query(request, JobStatus, id_contains=True)
    found = await jobs_db.list_jobs(db_of(request).pool, tenant_of(request).id, query)
    return json_response(wire.ListJobsResponse.of(query.page, found))


async def get_job(request: web.Request) -> web.Response:
    # (A poll is how upstream's clients wait for a job: it flags the job watched on a queue that
    # removes completed jobs, docs/operations.md, "Retention".)
    return json_response(
        await jobs_db.get_job_watched(db_of(request).pool, tenant_of(request).id, job_id_in_path(request))
    )


cancel_job = act_on(jobs_db.cancel_job, job_id_in_path)


async def retry_job(request: web.Request) -> web.Response:
    return json_response(
        await jobs_db.retry_job(db_of(request).pool, tenant_of(request).id, job_id_in_path(request))
    )


async def retry_jobs(request: web.Request) -> web.Response:
    body = await decode(request, wire.RetryJobsRequest)
    which = body.to_filter(settings_of(request).max_batch)
    count = await jobs_db.retry_matching(db_of(request).pool, tenant_of(request).id, which)
    return json_response(wire.RetryJobsResponse(retried=count))


async def cancel_jobs(request: web.Request) -> web.Response:
    body = await decode(request, wire.CancelJobsRequest)
    which = body.to_filter(settings_of(request).max_batch)
    count = await jobs_db.cancel_matching(db_of(request).pool, tenant_of(request).id, which)
    return json_response(wire.CancelJobsResponse(cancelled=count))


async def job_events(request: web.Request) -> web.StreamResponse:
    """`status` events carrying the job without its progress, one per change (a job's JSON changes
    only with its status), until a terminal status; between them (extensions, docs/visibility.md)
    a `progress` event whenever the worker reports progress and a `log` event per log line after
    `?log_after=` (default 0: every line)."""
    db = db_of(request)
    tenant = tenant_of(request).id
    with streams_of(request).held(tenant):  # past the caps: 429 or 503, before any query
        return await _job_events(request, db, tenant)


async def _job_events(request: web.Request, db: Database, tenant: str) -> web.StreamResponse:
    job_id = (await jobs_db.get_job(db.pool, tenant, job_id_in_path(request))).id
    after = non_negative_int(request, "log_after", 0)

    async def read() -> tuple[list[Event], bool] | None:
        nonlocal after
        try:
            job = await jobs_db.get_job(db.pool, tenant, job_id)
            events: list[Event] = []
            while True:  # every line stored so far (a job keeps at most its cap of them)
                page = await visibility.job_logs(db.pool, tenant, job_id, after, MAX_LOG_PAGE)
                events += [("log", msgspec.json.encode(line)) for line in page.lines]
                after = page.lines[-1].seq if page.lines else after
                if not page.has_more:
                    break
        except NotFound:
            return None
        if job.progress is not None:
            events.append(("progress", msgspec.json.encode(job.progress)))
        events.append(("status", msgspec.json.encode(msgspec.structs.replace(job, progress=None))))
        return events, job.terminal

    async with watchers.watching_job(db.pool, job_id, SSE_MAX_SECS + 60):
        subscribe = functools.partial(db.hub.watch_job, str(job_id))
        return await stream_events(request, lifecycle_of(request), subscribe, read, SSE_MAX_SECS)


async def job_logs(request: web.Request) -> web.Response:
    after = non_negative_int(request, "after", 0)
    limit = clamped_int(request, "limit", DEFAULT_LOG_PAGE, 1, MAX_LOG_PAGE)
    return json_response(
        await visibility.job_logs(
            db_of(request).pool, tenant_of(request).id, job_id_in_path(request), after, limit
        )
    )


async def job_attempts(request: web.Request) -> web.Response:
    attempts = await visibility.job_attempts(
        db_of(request).pool, tenant_of(request).id, job_id_in_path(request)
    )
    return json_response(wire.JobAttemptsResponse(attempts=attempts))
