"""The remote worker protocol (shared/seed/remote-workers.md): lease with long-poll, heartbeat,
complete, fail. Worker-token routes; not tenant-scoped."""

from __future__ import annotations

from aiohttp import web

from services.api.params import queue_in_path
from shared import wire
from shared.db import jobs as jobs_db
from shared.domain import Conflict, NotFound
from shared.http import decode, json_response
from shared.leasing import lease_jobs
from shared.runtime import RESOURCES

LEASE_LOST = "lease is no longer held (it expired and the job was reclaimed)"


async def lease(request: web.Request) -> web.Response:
    body = await decode(request, wire.LeaseJobsRequest)
    rows = await lease_jobs(
        request.app[RESOURCES],
        queue_in_path(request),
        body.max_jobs or 1,
        body.lease_secs or 30,
        body.wait_secs or 0,
    )
    return json_response(
        wire.LeaseJobsResponse(
            jobs=[wire.LeasedJob(job=jobs_db.to_job(r), lease_token=str(r["lease_token"])) for r in rows]
        )
    )


def _ids(request: web.Request, token: str) -> tuple:
    job_id = request.match_info["id"]
    jid = jobs_db.parse_id(job_id)
    if jid is None:
        raise NotFound(f"job not found: {job_id}")
    return jid, jobs_db.parse_id(token)


async def heartbeat(request: web.Request) -> web.Response:
    body = await decode(request, wire.HeartbeatRequest)
    jid, token = _ids(request, body.lease_token)
    verdict, status = await jobs_db.heartbeat(request.app[RESOURCES].pool, jid, token, body.extend_secs)
    if verdict == "missing":
        raise NotFound(f"job not found: {jid}")
    if verdict == "conflict":
        raise Conflict(LEASE_LOST)
    return json_response(wire.HeartbeatResponse(status=status))  # type: ignore[arg-type]


async def complete(request: web.Request) -> web.Response:
    body = await decode(request, wire.CompleteJobRequest)
    jid, token = _ids(request, body.lease_token)
    verdict, _ = await request.app[RESOURCES].completer.complete(jid, token, body.result or {})
    if verdict == "missing":
        raise NotFound(f"job not found: {jid}")
    if verdict == "conflict":
        raise Conflict("lease is no longer held; the job was reclaimed")
    return web.Response(status=204)


async def fail(request: web.Request) -> web.Response:
    body = await decode(request, wire.FailJobRequest)
    jid, token = _ids(request, body.lease_token)
    retryable = True if body.retryable is None else body.retryable
    verdict, _ = await jobs_db.fail(request.app[RESOURCES].pool, jid, token, body.error, retryable)
    if verdict == "missing":
        raise NotFound(f"job not found: {jid}")
    if verdict == "conflict":
        raise Conflict("lease is no longer held; the job was reclaimed")
    return web.Response(status=204)
