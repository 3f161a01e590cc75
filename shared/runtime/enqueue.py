"""Enqueueing with trace context: a job (through the group commit) or a batch (one statement) keeps
the W3C trace context it was created in, and, when the process exports traces, the enqueue gets
its span, whose context the jobs then keep (shared/tracing.py). Without a tracer this is the plain
insert, plus the caller's context when it sent one."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import msgspec

from shared.db import audit
from shared.db import jobs as jobs_db
from shared.db.database import Database
from shared.domain.jobs import NewJob
from shared.domain.traces import TraceContext
from shared.runtime.leasing import insert_handing_off


def _traced(job: NewJob, trace: TraceContext | None) -> NewJob:
    return job if trace is None else msgspec.structs.replace(job, trace=trace)


async def enqueue_one(
    db: Database, tenant: str | None, job: NewJob, parent: TraceContext | None
) -> uuid.UUID:
    """Insert one job (concurrent ones share a statement), straight into the hands of a lease call
    parked on its queue when one may take it (shared/runtime/leasing.py); its id."""
    tracer = db.tracer
    if tracer is None:
        return await insert_handing_off(db, tenant, _traced(job, parent))
    with tracer.enqueue(parent, tenant, [job]) as span:
        job_id = await insert_handing_off(db, tenant, _traced(job, span.context))
        span.jobs_created([job_id])
    return job_id


async def enqueue_many(
    db: Database, tenant: str | None, jobs: Sequence[NewJob], parent: TraceContext | None
) -> list[uuid.UUID]:
    """Insert a batch in one statement; the ids in input order. One enqueue span for the batch.
    Within an audited request the batch's entry (its count) is written in the same transaction."""
    tracer = db.tracer
    if tracer is None:
        traced = jobs if parent is None else [_traced(job, parent) for job in jobs]
        return await _insert_audited(db, tenant, traced)
    with tracer.enqueue(parent, tenant, jobs) as span:
        ids = await _insert_audited(db, tenant, [_traced(job, span.context) for job in jobs])
        span.jobs_created(ids)
    return ids


async def _insert_audited(db: Database, tenant: str | None, jobs: Sequence[NewJob]) -> list[uuid.UUID]:
    async with audit.change(db.pool) as conn:
        ids = await jobs_db.insert_jobs(conn, tenant, jobs)
        audit.selected(None, len(ids))
    return ids
