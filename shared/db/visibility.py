"""Visibility's statements (docs/visibility.md): a job's log lines and its attempts, and the worker
registry. The writes that end attempts are the job statements themselves (shared/db/jobs.py): each
writes its attempt's history row, so nothing here records an outcome."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import msgspec

from shared.db import push as push_db
from shared.db.jobs import lease_refusal
from shared.db.pool import Executor
from shared.db.queries import Q
from shared.domain.errors import NotFound
from shared.domain.visibility import (
    WORKER_LIVE_SECS,
    Attempt,
    AttemptOutcome,
    JobLogs,
    LogLine,
    LogsAppended,
    NewLogLine,
    Worker,
    WorkerInfo,
)

_encode = msgspec.json.Encoder().encode


async def _check_job(db: Executor, tenant: str, job_id: uuid.UUID) -> None:
    if await db.fetchval(Q.job_owner_state, job_id, tenant) is None:
        raise NotFound("job", job_id)


# --- logs ----------------------------------------------------------------------------------------


async def append_logs(
    db: Executor, job_id: uuid.UUID, token: uuid.UUID | None, lines: Sequence[NewLogLine], max_bytes: int
) -> LogsAppended:
    """Store `lines` for the holder of the job's latest lease, up to the job's `max_bytes` of
    messages; the rest are dropped and counted. Another token is a Conflict, an unknown job
    NotFound."""
    row = None
    if token is not None:
        row = await db.fetchrow(Q.append_job_logs, job_id, token, _encode(list(lines)).decode(), max_bytes)
    if row is None or not row["found"]:
        raise await lease_refusal(db, job_id, token)
    return LogsAppended(stored=row["stored"], dropped=row["dropped"], last_seq=row["last_seq"])


async def job_logs(db: Executor, tenant: str, job_id: uuid.UUID, after: int, limit: int) -> JobLogs:
    """The tenant's job's lines after seq `after`, oldest first, at most `limit`."""
    await _check_job(db, tenant, job_id)
    rows = await db.fetch(Q.job_logs, job_id, after, limit + 1)
    totals = await db.fetchrow(Q.job_log_totals, job_id)
    lines = [
        LogLine(seq=r["seq"], attempt=r["attempt"], ts=r["ts"], message=r["message"], level=r["level"])
        for r in rows[:limit]
    ]
    return JobLogs(
        lines=lines,
        last_seq=totals["last_seq"] if totals else 0,
        dropped=totals["dropped"] if totals else 0,
        has_more=len(rows) > limit,
    )


# --- attempts ------------------------------------------------------------------------------------


async def job_attempts(db: Executor, tenant: str, job_id: uuid.UUID) -> list[Attempt]:
    """Every attempt of the tenant's job, in order: the history rows, then the job row's own
    attempt when it is running or completed."""
    await _check_job(db, tenant, job_id)
    # A pushed job's deliveries (docs/push.md): each attempt shows its last one.
    delivered = {d.attempt: d for d in await push_db.job_deliveries(db, job_id)}
    attempts = []
    for r in await db.fetch(Q.job_attempts, job_id):
        started, ended = r["started_at"], r["ended_at"]
        attempts.append(
            Attempt(
                attempt=r["attempt"],
                outcome=AttemptOutcome(r["outcome"]),
                worker_id=r["worker_id"],
                started_at=started,
                ended_at=ended,
                duration_secs=(ended - started).total_seconds() if started and ended else None,
                error_message=r["error_message"],
                delivery=delivered.get(r["attempt"]),
            )
        )
    return attempts


# --- workers -------------------------------------------------------------------------------------


async def worker_seen(
    db: Executor, worker_id: str, queue: str, info: WorkerInfo | None, tenants: Sequence[str]
) -> None:
    """One lease call of `worker_id` on `queue`, for `tenants` (one upsert statement)."""
    await db.execute(
        Q.worker_seen,
        worker_id,
        queue,
        info,
        sorted(set(tenants)),
    )


async def tenant_workers(db: Executor, tenant: str, limit: int) -> list[Worker]:
    """The workers that leased the tenant's jobs (or leased with its worker keys), most recently
    seen first."""
    return [
        Worker(
            worker_id=r["worker_id"],
            queues=list(r["queues"]),
            in_flight=r["in_flight"],
            first_seen_at=r["first_seen_at"],
            last_seen_at=r["last_seen_at"],
            live=r["live"],
            info=None if r["info"] is None else msgspec.convert(r["info"], WorkerInfo),
        )
        for r in await db.fetch(Q.tenant_workers, tenant, WORKER_LIVE_SECS, limit)
    ]
