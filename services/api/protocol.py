"""The remote worker protocol (shared/seed/remote-workers.md): lease with long-poll, heartbeat,
complete, fail, and (docs/visibility.md) progress on the heartbeat, log lines, and the worker's
name on lease. Worker routes: the worker token acts for every tenant; a worker key for its own
tenant only, on its own queues (another queue is a 403 on lease), and another tenant's job is
answered as an unknown job (404). Only a key holder pays for the ownership check: the worker
token's path is as it was."""

from __future__ import annotations

import contextlib
import time
import uuid

from aiohttp import web

from services.api.context import (
    db_of,
    lifecycle_of,
    long_polls_of,
    pushed_of,
    settings_of,
    worker_key_of,
    workers_seen_of,
)
from services.api.params import job_id, job_id_in_path, lease_token, queue_in_path
from shared import wire
from shared.db import jobs as jobs_db
from shared.db import visibility, worker_keys
from shared.domain.caps import check_size
from shared.domain.errors import DomainError, NotFound
from shared.domain.jobs import Lease
from shared.runtime.leasing import lease_jobs
from shared.web.body import decode, json_response
from shared.web.errors import client_gone, status_of


async def _check_owned(request: web.Request, job_id: uuid.UUID) -> None:
    """A worker key may act on its tenant's jobs only; any other is answered as unknown."""
    grant = worker_key_of(request)
    if grant is not None and not await worker_keys.owned_jobs(db_of(request).pool, grant.tenant, [job_id]):
        raise NotFound("job", job_id)


async def lease(request: web.Request) -> web.Response:
    body = await decode(request, wire.LeaseJobsRequest)
    queue = queue_in_path(request)
    grant = worker_key_of(request)
    if grant is not None:
        grant.check_queue(queue)
    await pushed_of(request).check(queue, None if grant is None else grant.tenant)
    leases = await lease_jobs(
        db_of(request),
        lifecycle_of(request),
        queue,
        body.max_jobs or 1,
        body.lease_secs or 30,
        body.wait_secs or 0,
        settings_of(request).worker_poll_secs,
        tenant=None if grant is None else grant.tenant,
        worker_id=body.worker_id,
        parking=long_polls_of(request),
    )
    if body.worker_id is not None:
        await _worker_seen(request, body, queue, leases)
    if leases and client_gone(request):
        # The worker hung up while its long-poll waited: nobody will read this answer, so the jobs
        # go back at once (no retry spent) rather than sit leased to no one until the janitor.
        await _give_back(request, leases)
        leases = []
    return json_response(wire.LeaseJobsResponse(jobs=[wire.LeasedJob.of(lease) for lease in leases]))


async def _give_back(request: web.Request, leases: list[Lease]) -> None:
    await jobs_db.release(db_of(request).pool, [(gone.job.id, gone.token) for gone in leases])


async def _worker_seen(
    request: web.Request, body: wire.LeaseJobsRequest, queue: str, leases: list[Lease]
) -> None:
    """The registry's one upsert for this lease call: under the worker key's tenant, or for the
    worker token under the fleet-wide row and each tenant whose jobs it leased. Should it fail, the
    jobs just leased go back (the worker will not hear of them)."""
    assert body.worker_id is not None
    grant = worker_key_of(request)
    tenants = [grant.tenant] if grant is not None else ["", *(lease.job.tenant_id or "" for lease in leases)]
    seen, key = workers_seen_of(request), tuple(sorted(set(tenants)))
    if not seen.due(body.worker_id, queue, key, body.worker is not None, time.monotonic()):
        return
    try:
        await visibility.worker_seen(db_of(request).pool, body.worker_id, queue, body.worker, tenants)
    except BaseException:
        seen.forget(body.worker_id, queue, key)
        with contextlib.suppress(Exception):
            await _give_back(request, leases)
        raise


async def heartbeat(request: web.Request) -> web.Response:
    body = await decode(request, wire.HeartbeatRequest)
    job = job_id_in_path(request)
    await _check_owned(request, job)
    db, token = db_of(request), lease_token(body.lease_token)
    if body.progress is None:  # (the usual heartbeat: group-committed with those in flight)
        status = await db.heartbeats.beat(job, token, body.extend_secs)
    else:
        status = await jobs_db.heartbeat(
            db.pool, job, token, body.extend_secs, jobs_db.HEARTBEAT_LEASE_LOST, body.progress.to_progress()
        )
    return json_response(wire.HeartbeatResponse(status=status))


async def post_logs(request: web.Request) -> web.Response:
    """Log lines from the holder of the job's latest lease (docs/visibility.md)."""
    body = await decode(request, wire.PostJobLogsRequest)
    lines = body.to_lines()
    job = job_id_in_path(request)
    await _check_owned(request, job)
    appended = await visibility.append_logs(
        db_of(request).pool, job, lease_token(body.lease_token), lines, settings_of(request).job_log_max_bytes
    )
    return json_response(appended)


async def complete(request: web.Request) -> web.Response:
    body = await decode(request, wire.CompleteJobRequest)
    check_size("result", body.result, settings_of(request).max_result_bytes)
    job = job_id_in_path(request)
    await _check_owned(request, job)
    await db_of(request).completer.complete(job, lease_token(body.lease_token), body.result or {})
    return web.Response(status=204)


async def complete_many(request: web.Request) -> web.Response:
    """The batch acknowledgement: each item goes through the same group commit as the per-job route
    (so concurrent batches share statements too) and gets the answer that route would give."""
    body = await decode(request, wire.CompleteJobsRequest)
    body.check_sizes(settings_of(request).max_result_bytes)
    written: list[BaseException | None] = [None] * len(body.jobs)
    writes: list[jobs_db.Completion] = []
    at: list[int] = []  # where each write's answer goes
    for index, item in enumerate(body.jobs):
        try:
            writes.append((job_id(item.id), lease_token(item.lease_token), item.result or {}))
            at.append(index)
        except DomainError as refused:  # an id that names no job: that item's 404
            written[index] = refused
    grant = worker_key_of(request)
    if grant is not None and writes:  # another tenant's job is, to a worker key, no job at all
        owned = await worker_keys.owned_jobs(db_of(request).pool, grant.tenant, [w[0] for w in writes])
        for index, write in zip(at, writes, strict=True):
            if write[0] not in owned:
                written[index] = NotFound("job", write[0])
        kept = [(index, write) for index, write in zip(at, writes, strict=True) if write[0] in owned]
        at, writes = [index for index, _ in kept], [write for _, write in kept]
    for index, answer in zip(at, await db_of(request).completer.submit_all(writes), strict=True):
        written[index] = answer
    return json_response(
        wire.CompleteJobsResponse(
            results=[_answer(item.id, outcome) for item, outcome in zip(body.jobs, written, strict=True)]
        )
    )


# The per-job route's refusals, as a batch item's outcome (statuses from shared/web/errors.py).
_REFUSED: dict[int, wire.CompletionOutcome] = {409: "conflict", 404: "not_found"}


def _answer(item_id: str, outcome: BaseException | None) -> wire.CompletionAnswer:
    if outcome is None:
        return wire.CompletionAnswer(id=item_id, outcome="completed", status=204)
    if not isinstance(outcome, DomainError) or status_of(outcome) not in _REFUSED:
        raise outcome  # the database is unreachable or something unforeseen: the whole call fails
    status = status_of(outcome)
    return wire.CompletionAnswer(id=item_id, outcome=_REFUSED[status], status=status, error=outcome.message)


async def fail(request: web.Request) -> web.Response:
    body = await decode(request, wire.FailJobRequest)
    retryable = True if body.retryable is None else body.retryable
    job = job_id_in_path(request)
    await _check_owned(request, job)
    await db_of(request).failures.fail(job, lease_token(body.lease_token), body.kept_error(), retryable)
    return web.Response(status=204)
