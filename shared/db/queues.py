"""Queue repository, per tenant: the backlog view, pause/resume of the tenant's claims, and the
cap on a tenant's distinct queues (migration 35)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator

import asyncpg

from shared.db.pool import Executor, Pool
from shared.db.queries import Q
from shared.domain.errors import TooManyQueues
from shared.domain.jobs import QueueControl, QueueStats

# Raised by the tenant_queues trigger and check_queue_room past the cap.
QUEUE_CAP_SQLSTATE = "QFQ01"


@contextlib.contextmanager
def capped() -> Iterator[None]:
    """Around a write that may record a queue new to its tenant: the cap's refusal becomes
    TooManyQueues (409), with the database's message."""
    try:
        yield
    except asyncpg.PostgresError as err:
        if err.sqlstate != QUEUE_CAP_SQLSTATE:
            raise
        raise TooManyQueues(str(err)) from None


async def record_cap(db: Executor, max_queues: int) -> None:
    """Make `max_queues` (0: none) the cap on every tenant's distinct queues, fleet-wide."""
    await db.execute(Q.record_queue_cap, max_queues)


async def check_room(db: Executor, tenant: str | None, queues: Iterable[str]) -> None:
    """Raise TooManyQueues when `queues` holds more names new to `tenant` than its cap has room
    for (a schedule or a workflow that would enqueue on them later)."""
    with capped():
        await db.execute(Q.check_queue_room, tenant or "", sorted(set(queues)))


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
        with capped():  # a queue the tenant never used gets its row, as a job would give it
            await conn.execute(Q.set_queue_paused, queue, tenant, paused)
        if not paused:
            await conn.execute(Q.wake_queue, queue)
        counts = await conn.fetchrow(Q.tenant_queue_counts, tenant, queue)
    assert counts is not None
    return QueueControl(queue=queue, paused=paused, pending=counts["pending"], running=counts["running"])
