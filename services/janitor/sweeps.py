"""The janitor's sweeps. Each is safe with any number of janitors running: reclaim takes rows with
SKIP LOCKED, wake-ups are idempotent hints, and retention takes an advisory lock per round."""

from __future__ import annotations

from datetime import datetime, timedelta

import structlog

from shared import metrics
from shared.db import crons
from shared.db import workflows as workflows_db
from shared.db.queries import Q
from shared.runtime import Resources

log = structlog.get_logger("queueflow.janitor")

RETENTION_ROUND = 5000


async def reclaim_expired(res: Resources, max_rounds: int = 10) -> int:
    """Expired leases go through the retry policy; returns how many were reclaimed."""
    total = 0
    batch = res.settings.janitor_batch
    for _ in range(max_rounds):
        rows = await res.pool.fetch(Q.reclaim_expired, batch)
        for row in rows:
            metrics.LEASES_RECLAIMED.inc()
            if row["status"] == "retrying":
                metrics.JOBS_RETRIED.inc()
            else:
                metrics.JOBS_FAILED.inc()
                metrics.JOBS_DEAD_LETTERED.inc()
            log.info("lease_reclaimed", job_id=str(row["id"]), queue=row["queue_name"], status=row["status"])
        total += len(rows)
        if len(rows) < batch:
            break
    return total


async def prune_watchers(res: Resources) -> None:
    """SSE watcher rows of streams that died without unregistering."""
    await res.pool.execute(Q.prune_job_watchers)
    await res.pool.execute(Q.prune_workflow_watchers)


async def time_out_workflows(res: Resources) -> int:
    count = await workflows_db.time_out_expired(res.pool, res.settings.janitor_batch)
    if count:
        log.info("workflows_timed_out", workflows=count)
    return count


async def heal_stalled_workflows(res: Resources, older_than_secs: float = 30.0) -> int:
    """Queue a re-evaluation for live workflows that nothing could move forward any more."""
    rows = await res.pool.fetch(
        Q.stalled_workflows, older_than_secs, res.settings.janitor_batch, workflows_db.OUTBOX_ATTEMPTS
    )
    if rows:
        log.warning("workflows_healed", workflows=len(rows))
    return len(rows)


async def wake_due_queues(res: Resources, since: datetime) -> datetime:
    """NOTIFY each queue with a job that fell due after `since`; returns the database's now."""
    row = await res.pool.fetchrow(Q.wake_due_queues, since)
    assert row is not None
    return row["now"]  # type: ignore[no-any-return]


async def fire_crons(res: Resources) -> int:
    return await crons.fire_due(res.pool, res.settings.default_queue, res.settings.janitor_batch)


async def seconds_until_next_due(res: Resources) -> float | None:
    """Until the next delayed job or cron occurrence falls due; None when nothing is waiting."""
    waits = []
    for query in (Q.next_due, Q.next_cron_due):
        row = await res.pool.fetchrow(query)
        if row is not None and row["at"] is not None:
            waits.append(max(0.0, (row["at"] - row["now"]).total_seconds()))
    return min(waits) if waits else None


async def prune(res: Resources, older_than_hours: float) -> int:
    """Delete terminal history older than the window, in bounded rounds; one janitor at a time."""
    deleted = 0
    cutoff = await res.pool.fetchval("SELECT now()") - timedelta(hours=older_than_hours)
    for query in (Q.prune_dead_letters, Q.prune_jobs, Q.prune_workflows):
        while True:
            async with res.pool.acquire() as conn, conn.transaction():
                if not await conn.fetchval(Q.retention_lock):
                    return deleted  # another janitor is pruning
                status = await conn.execute(query, cutoff, RETENTION_ROUND)
            n = int(status.split()[-1])
            deleted += n
            if n < RETENTION_ROUND:
                break
    if deleted:
        log.info("retention_pruned", rows=deleted, older_than_hours=older_than_hours)
    return deleted
