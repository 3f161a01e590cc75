"""Claiming with a long-poll, shared by the API's lease route and the in-process workers."""

from __future__ import annotations

import asyncio
import uuid

from shared import metrics, tracing
from shared.db import jobs as jobs_db
from shared.db.database import Database
from shared.db.pool import is_unavailable
from shared.domain.jobs import Lease
from shared.runtime.keys import Lifecycle


async def lease_jobs(
    db: Database,
    lifecycle: Lifecycle,
    queue: str,
    max_jobs: int,
    lease_secs: int,
    wait_secs: float,
    poll_secs: float,
    timeout_grace: int | None = None,
    *,
    tenant: str | None = None,
    worker_id: str | None = None,
) -> list[Lease]:
    """Claim up to `max_jobs`; when none is due, park on the queue's signal (no connection held)
    until a job arrives, the wait ends, or the safety poll (`poll_secs`) re-checks. Idle waiters of
    one queue share one safety claim per poll interval instead of each asking the database.

    `tenant` (a worker key's) claims only that tenant's jobs; `worker_id` is recorded on the jobs
    claimed (their attempts' worker). Such a claim finding nothing says
    nothing of the queue's other jobs, so it is not recorded as the queue being empty, and its
    waiter observes the queue's wake-ups rather than spending one meant for another tenant's job.

    When the process exports traces, each leased job gets its `lease` span (shared/tracing.py)."""
    hub = db.hub
    tracer = db.tracer
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_secs
    while True:
        seen = hub.epoch(queue)  # read before the claim: a notification after it is never lost
        async with hub.gate(queue):
            if wait_secs > 0 and hub.known_empty(queue, seen, poll_secs):
                # A long-poll, and nothing announced since the last empty claim: asking again is
                # waste. (A call that will not wait always asks.)
                leases = []
            else:
                key = uuid.uuid4()
                claimed_at = tracing.now() if tracer is not None else 0
                try:
                    leases = await jobs_db.claim(
                        db.pool,
                        queue,
                        max_jobs,
                        lease_secs,
                        timeout_grace,
                        next(db.claim_turns),
                        key,
                        tenant=tenant,
                        worker_id=worker_id,
                    )
                except Exception as err:
                    if is_unavailable(err):  # it may have committed: its jobs must not sit leased
                        db.give_back_unanswered_claim(queue, key)
                    raise
                if leases or tenant is None:
                    hub.claimed(queue, seen, bool(leases))
        if leases:
            if tracer is not None:  # a span per job, from the claim that leased it
                tracer.leased(queue, leases, claimed_at)
            # started_at is this claim; a redelivery has no wait to measure
            metrics.observe_many(
                metrics.QUEUE_WAIT.labels(queue),
                [
                    max(0.0, (lease.job.started_at - lease.job.scheduled_at).total_seconds())
                    for lease in leases
                    if lease.job.delivery_count == 1 and lease.job.started_at is not None
                ],
            )
            if len(leases) == max_jobs:
                hub.poke(queue)  # more may be waiting: pass the wake-up on
            return leases
        remaining = deadline - loop.time()
        if remaining <= 0 or lifecycle.draining:
            return []
        metrics.LONG_POLL_WAITERS.inc()
        try:
            await hub.wait(queue, seen, min(remaining, poll_secs), observe=tenant is not None)
        finally:
            metrics.LONG_POLL_WAITERS.dec()
