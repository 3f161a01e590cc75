"""The janitor's statements: reclaiming expired leases, waking queues whose delayed jobs fell due,
retention, and the removal of watched jobs of removing queues once their grace has passed. Each is safe with any number of janitors running: reclaim takes rows with SKIP
LOCKED, wake-ups are idempotent hints, and retention takes an advisory lock per round."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from msgspec import Struct

from shared.db.pool import Executor, Pool
from shared.db.queries import Q
from shared.db.workflows import OUTBOX_ATTEMPTS
from shared.domain.jobs import JobStatus

RETENTION_ROUND = 5000


class Reclaimed(Struct, frozen=True):
    """A job whose lease expired, after the retry policy: `retrying`, or `failed` (dead-lettered)."""

    id: uuid.UUID
    queue: str
    status: JobStatus
    task: str = ""
    attempt_secs: float | None = None  # from the attempt's lease to its reclaim


async def now(db: Executor) -> datetime:
    """The database's clock: every time comparison uses it, never a process clock."""
    value: datetime = await db.fetchval("SELECT now()")
    return value


async def reclaim_expired(db: Executor, batch: int) -> list[Reclaimed]:
    """Up to `batch` expired leases, through the retry policy; their lease tokens are cleared."""
    return [
        Reclaimed(r["id"], r["queue_name"], JobStatus(r["status"]), r["task_name"], r["secs"])
        for r in await db.fetch(Q.reclaim_expired, batch)
    ]


async def wake_due_queues(db: Executor, since: datetime) -> datetime:
    """NOTIFY each queue with a job that fell due in (since, now]; returns the database's now."""
    row = await db.fetchrow(Q.wake_due_queues, since)
    assert row is not None
    value: datetime = row["now"]
    return value


async def seconds_until_next_due(db: Executor) -> float | None:
    """Until the next delayed or retrying job, the next cron occurrence, or the next rate room of a
    limit key falls due; None when nothing is waiting."""
    waits = []
    for query in (Q.next_due, Q.next_cron_due, Q.next_limit_wake):
        row = await db.fetchrow(query)
        if row is not None and row["at"] is not None:
            wait: timedelta = row["at"] - row["now"]
            waits.append(max(0.0, wait.total_seconds()))
    return min(waits) if waits else None


async def prune(pool: Pool, older_than_hours: float) -> int:
    """Delete terminal history older than the window, in bounded rounds: dead letters, then jobs
    (never one a remaining dead letter points to; their attempts and log lines with them), then
    workflows, then outbox rows the advancer set aside, then workers not seen since. One janitor
    at a time: a round that cannot take the advisory lock ends the pruning."""
    deleted = 0
    cutoff = await now(pool) - timedelta(hours=older_than_hours)
    rounds = [
        (Q.prune_dead_letters, ()),
        (Q.prune_jobs, ()),
        (Q.prune_workflows, ()),
        (Q.prune_abandoned_outbox, (OUTBOX_ATTEMPTS,)),
        (Q.prune_workers, ()),
    ]
    for query, extra in rounds:
        while True:
            async with pool.acquire() as conn, conn.transaction():
                if not await conn.fetchval(Q.retention_lock):
                    return deleted  # another janitor is pruning
                if query is Q.prune_jobs:  # it answers a count (its jobs' log lines go with them)
                    n = int(await conn.fetchval(query, cutoff, RETENTION_ROUND, *extra))
                else:
                    n = int((await conn.execute(query, cutoff, RETENTION_ROUND, *extra)).split()[-1])
            deleted += n
            if n < RETENTION_ROUND:
                break
    return deleted


async def remove_lingering(db: Executor, grace_secs: float, batch: int) -> int:
    """Delete completed jobs of removing queues that were kept for their watchers, once they have
    been completed for `grace_secs` (at most `batch`); returns how many went."""
    return int(await db.fetchval(Q.remove_lingering_jobs, grace_secs, batch))


async def prune_lapsed_unique_keys(db: Executor, batch: int) -> int:
    """Delete unique keys whose window has passed (at most `batch`); a lapsed key is free whether
    its row is there or not, so this only keeps the table small. Returns how many went."""
    status = await db.execute(Q.prune_lapsed_unique_keys, batch)
    return int(status.split()[-1])
