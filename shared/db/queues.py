"""Queue repository, per tenant: the backlog view, and pause/resume of the tenant's claims."""

from __future__ import annotations

import math

from shared.db.pool import Executor, Pool
from shared.db.queries import Q
from shared.domain.jobs import QueueControl, QueueStats


async def tenant_queues(db: Executor, tenant: str) -> list[QueueStats]:
    """The tenant's backlog on every queue it has used, sorted by name."""
    return [
        QueueStats(
            queue=r["queue_name"],
            pending=r["pending"],
            scheduled=r["scheduled"],
            running=r["running"],
            paused=r["paused"],
            oldest_pending_age_secs=None if r["oldest_age"] is None else math.floor(r["oldest_age"]),
        )
        for r in await db.fetch(Q.tenant_queue_stats, tenant)
    ]


async def set_paused(pool: Pool, tenant: str, queue: str, paused: bool) -> QueueControl:
    """Pause or resume the tenant's claims on `queue`; a resume wakes parked workers on commit."""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(Q.set_queue_paused, queue, tenant, paused)
        if not paused:
            await conn.execute(Q.wake_queue, queue)
        counts = await conn.fetchrow(Q.tenant_queue_counts, tenant, queue)
    assert counts is not None
    return QueueControl(queue=queue, paused=paused, pending=counts["pending"], running=counts["running"])
