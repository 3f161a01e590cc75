"""Queue repository, per tenant: the backlog view, pause/resume of the tenant's claims, the
retention of completed jobs (migration 37), and the cap on a tenant's distinct queues (migration
35)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterable, Iterator, Mapping

import asyncpg

from shared.db import audit
from shared.db.pool import Executor, Pool
from shared.db.queries import Q
from shared.domain.errors import TooManyQueues
from shared.domain.jobs import QueueControl, QueueStats, Retention

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


async def record_retention_defaults(db: Executor, defaults: Mapping[str, Retention]) -> None:
    """Make `defaults` (--queue-retention) the fleet's retention of completed jobs by queue name,
    for every tenant that chose none of its own on the queue; names left out are kept's again."""
    names = sorted(defaults)
    await db.execute(Q.record_queue_retention_defaults, names, [defaults[n].value for n in names])


def _stats(r: asyncpg.Record, spelled_out: bool) -> QueueStats:
    retention = Retention(r["retention"])
    return QueueStats(
        queue=r["queue_name"],
        pending=r["pending"],
        scheduled=r["scheduled"],
        running=r["running"],
        paused=r["paused"],
        oldest_pending_age_secs=None if r["oldest_age"] is None else math.floor(r["oldest_age"]),
        retention=retention if spelled_out or retention is not Retention.KEEP else None,
    )


async def tenant_queues(db: Executor, tenant: str) -> list[QueueStats]:
    """The tenant's backlog on every queue it has used, sorted by name (a queue's retention named
    only when it removes completed jobs: the list is upstream's)."""
    return [_stats(r, spelled_out=False) for r in await db.fetch(Q.tenant_queue_stats, tenant)]


async def tenant_queue(db: Executor, tenant: str, queue: str) -> QueueStats:
    """One queue of the tenant's, with its settings spelled out (a queue it never used: empty,
    with its defaults)."""
    row = await db.fetchrow(Q.tenant_queue, tenant, queue)
    assert row is not None
    return _stats(row, spelled_out=True)


async def set_retention(db: Executor, tenant: str, queue: str, retention: Retention) -> QueueStats:
    """The tenant's own retention of completed jobs on `queue`, whatever the fleet's default; it
    applies to every job of theirs that completes from then on."""
    async with audit.change(db, atomic=True) as conn:
        with capped():  # a queue the tenant never used gets its row, as a job would give it
            await conn.execute(Q.set_queue_retention, queue, tenant, retention.value)
        return await tenant_queue(conn, tenant, queue)


async def set_paused(pool: Pool, tenant: str, queue: str, paused: bool) -> QueueControl:
    """Pause or resume the tenant's claims on `queue`; a resume wakes parked workers on commit."""
    async with audit.change(pool, atomic=True) as conn:
        with capped():  # a queue the tenant never used gets its row, as a job would give it
            await conn.execute(Q.set_queue_paused, queue, tenant, paused)
        if not paused:
            await conn.execute(Q.wake_queue, queue)
        counts = await conn.fetchrow(Q.tenant_queue_counts, tenant, queue)
    assert counts is not None
    return QueueControl(queue=queue, paused=paused, pending=counts["pending"], running=counts["running"])
