"""Claiming with a long-poll, shared by the API's lease route and the in-process workers."""

from __future__ import annotations

import asyncio

import asyncpg

from shared import metrics
from shared.db import jobs as jobs_db
from shared.runtime import Resources


async def lease_jobs(
    res: Resources,
    queue: str,
    max_jobs: int,
    lease_secs: int,
    wait_secs: float,
    timeout_grace: int | None = None,
) -> list[asyncpg.Record]:
    """Claim up to `max_jobs`; when none is due, park on the queue's signal (no connection held)
    until a job arrives, the wait ends, or the safety poll re-checks. Idle waiters of one queue
    share one safety claim per poll interval instead of each asking the database."""
    hub = res.hub
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_secs
    poll = res.settings.worker_poll_secs
    while True:
        seen = hub.epoch(queue)  # read before the claim: a notification after it is never lost
        async with hub.gate(queue):
            if wait_secs > 0 and hub.known_empty(queue, seen, poll):
                # A long-poll, and nothing announced since the last empty claim: asking again is
                # waste. (A call that will not wait always asks.)
                rows = []
            else:
                rows = await jobs_db.claim(
                    res.pool, queue, max_jobs, lease_secs, timeout_grace, next(res.claim_turns)
                )
                hub.claimed(queue, seen, bool(rows))
        if rows:
            for row in rows:
                if (
                    row["delivery_count"] == 1
                ):  # started_at is this claim; a redelivery has no wait to measure
                    metrics.QUEUE_WAIT.labels(queue).observe(
                        max(0.0, (row["started_at"] - row["scheduled_at"]).total_seconds())
                    )
            if len(rows) == max_jobs:
                hub.poke(queue)  # more may be waiting: pass the wake-up on
            return rows
        remaining = deadline - loop.time()
        if remaining <= 0 or res.draining:
            return []
        metrics.LONG_POLL_WAITERS.inc()
        try:
            await hub.wait(queue, seen, min(remaining, poll))
        finally:
            metrics.LONG_POLL_WAITERS.dec()
