"""A workload with known timestamps for the stats rollup's tests (migration 39): jobs written
through the db layer, then given the times a test names, and the rollup recounted over them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from shared.db import jobs as jobs_db
from shared.db import stats
from shared.domain.jobs import NewJob


@dataclass(frozen=True)
class Made:
    """One job of a workload: its status, and its minute and durations when it finished."""

    status: str
    created: datetime
    finished: datetime | None = None
    wait: float = 0.0
    run: float = 0.0


async def current_minute(pool: Any) -> datetime:
    value: datetime = await pool.fetchval("SELECT date_trunc('minute', now())")
    return value


async def make_jobs(
    pool: Any,
    tenant: str,
    queue: str,
    status: str,
    created: datetime,
    n: int = 1,
    *,
    wait: float = 0.0,
    run: float = 0.0,
    task: str = "t",
) -> list[Made]:
    """`n` jobs of `status` created at `created`; a finished one (completed or failed) started
    `wait` seconds later and finished `run` seconds after that; a running one holds a lease of an
    hour; `scheduled` is a pending job due in an hour."""
    ids: list[uuid.UUID] = await jobs_db.insert_jobs(
        pool, tenant, [NewJob(task_name=task, queue=queue) for _ in range(n)]
    )
    started = created + timedelta(seconds=wait)
    finished = started + timedelta(seconds=run)
    if status in ("completed", "failed"):
        await pool.execute(
            "UPDATE queueflow.jobs SET status = $2, created_at = $3, scheduled_at = $3, started_at = $4,"
            " attempt_started_at = $4, completed_at = $5, delivery_count = 1 WHERE id = ANY($1)",
            ids,
            status,
            created,
            started,
            finished,
        )
        if status == "failed":
            await pool.execute(
                "INSERT INTO queueflow.dead_letters (job_id, queue_name, task_name, reason, tenant_id, created_at)"
                " SELECT id, queue_name, task_name, 'non_retryable', tenant_id, completed_at FROM queueflow.jobs"
                " WHERE id = ANY($1)",
                ids,
            )
        return [Made(status, created, finished, wait, run) for _ in ids]
    if status == "running":
        await pool.execute(
            "UPDATE queueflow.jobs SET status = 'running', created_at = $2, scheduled_at = $2, started_at = $3,"
            " attempt_started_at = $3, lease_token = gen_random_uuid(), locked_until = now() + interval '1 hour',"
            " delivery_count = 1 WHERE id = ANY($1)",
            ids,
            created,
            started,
        )
    elif status == "scheduled":
        await pool.execute(
            "UPDATE queueflow.jobs SET created_at = $2, scheduled_at = now() + interval '1 hour' WHERE id = ANY($1)",
            ids,
            created,
        )
    else:
        assert status == "pending", status
        await pool.execute(
            "UPDATE queueflow.jobs SET created_at = $2, scheduled_at = $2 WHERE id = ANY($1)", ids, created
        )
    return [Made(status, created) for _ in ids]


async def make_retries(pool: Any, tenant: str, queue: str, at: datetime, n: int = 1) -> None:
    """`n` retries at minute `at`: jobs that fail retryably through fail_job (their creation is
    `at` too), then cancelled (out of the backlog); the capture fail_job writes is given `at`."""
    ids = await jobs_db.insert_jobs(pool, tenant, [NewJob(task_name="t", queue=queue) for _ in range(n)])
    leases = await jobs_db.claim(pool, queue, n, 60, tenant=tenant)
    assert sorted(lease.job.id for lease in leases) == sorted(ids)
    for lease in leases:
        await jobs_db.fail(pool, lease.job.id, lease.token, "boom", True)
    await pool.execute(
        "UPDATE queueflow.jobs SET status = 'cancelled', created_at = $2, scheduled_at = $2 WHERE id = ANY($1)",
        ids,
        at,
    )
    await pool.execute(
        "UPDATE queueflow.stats_captures SET minute = $3 WHERE tenant_key = $1 AND queue_name = $2 AND retried > 0",
        tenant,
        queue,
        at,
    )


async def recount_from(pool: Any, since: datetime) -> None:
    """Have the rollup count every minute from `since` again (the janitor's next scan does it)."""
    await pool.execute("UPDATE queueflow.stats_rollup SET rolled_up_to = $1", since)


async def roll_up_now(pool: Any, since: datetime) -> None:
    """Recount from `since` through the current minute, and fold the captures, at once."""
    await recount_from(pool, since)
    await stats.scan(pool, lag_secs=-60.0, max_minutes=100_000)
    await stats.fold(pool)
