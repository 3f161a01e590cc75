"""The remote worker protocol (shared/seed/remote-workers.md): lease with long-poll, heartbeat,
complete, fail. Worker-token routes; not tenant-scoped."""

from __future__ import annotations

from aiohttp import web

from services.api.context import db_of, lifecycle_of, settings_of
from services.api.params import job_id_in_path, lease_token, queue_in_path
from shared import wire
from shared.db import jobs as jobs_db
from shared.runtime.leasing import lease_jobs
from shared.web.body import decode, json_response

HEARTBEAT_LEASE_LOST = "lease is no longer held (it expired and the job was reclaimed)"


async def lease(request: web.Request) -> web.Response:
    body = await decode(request, wire.LeaseJobsRequest)
    leases = await lease_jobs(
        db_of(request),
        lifecycle_of(request),
        queue_in_path(request),
        body.max_jobs or 1,
        body.lease_secs or 30,
        body.wait_secs or 0,
        settings_of(request).worker_poll_secs,
    )
    return json_response(
        wire.LeaseJobsResponse(
            jobs=[wire.LeasedJob(job=lease.job, lease_token=str(lease.token)) for lease in leases]
        )
    )


async def heartbeat(request: web.Request) -> web.Response:
    body = await decode(request, wire.HeartbeatRequest)
    status = await jobs_db.heartbeat(
        db_of(request).pool,
        job_id_in_path(request),
        lease_token(body.lease_token),
        body.extend_secs,
        HEARTBEAT_LEASE_LOST,
    )
    return json_response(wire.HeartbeatResponse(status=status))


async def complete(request: web.Request) -> web.Response:
    body = await decode(request, wire.CompleteJobRequest)
    await db_of(request).completer.complete(
        job_id_in_path(request), lease_token(body.lease_token), body.result or {}
    )
    return web.Response(status=204)


async def fail(request: web.Request) -> web.Response:
    body = await decode(request, wire.FailJobRequest)
    retryable = True if body.retryable is None else body.retryable
    await jobs_db.fail(
        db_of(request).pool, job_id_in_path(request), lease_token(body.lease_token), body.error, retryable
    )
    return web.Response(status=204)
