"""Claiming with a long-poll, shared by the API's lease route and the in-process workers."""

from __future__ import annotations

import asyncio
import uuid
import weakref
from dataclasses import dataclass, field

import structlog

from shared import metrics, tracing
from shared.db import jobs as jobs_db
from shared.db.database import Database
from shared.db.pool import is_unavailable
from shared.domain.jobs import Lease
from shared.runtime.keys import Lifecycle

log = structlog.get_logger("queueflow.leasing")

# Lease calls that wait together for a queue's claim gate share one claim when they lease on the
# same terms (worker id, tenant, lease length): up to this many jobs for one claim. A claim's fixed
# cost is paid once for all of them, and the gate's two places go to claims many times larger
# instead of queueing small ones (docs/benchmarks.md, "Speed work, fifth round").
SHARED_CLAIM_MAX = 500


@dataclass(frozen=True, slots=True)
class _Terms:
    queue: str
    lease_secs: int
    timeout_grace: int | None
    tenant: str | None
    worker_id: str | None


@dataclass(slots=True)
class _Ask:
    max_jobs: int
    will_wait: bool
    answer: asyncio.Future[tuple[list[Lease], int]]


@dataclass(eq=False, slots=True)
class _SharedClaim:
    """One claim for the lease calls that joined it before it passed the gate."""

    terms: _Terms
    asks: list[_Ask] = field(default_factory=list)

    def room(self) -> int:
        """How many more jobs it may take before the cap."""
        return SHARED_CLAIM_MAX - sum(ask.max_jobs for ask in self.asks)


# Per database: the shared claim each set of terms may still join (it has not passed the gate).
_OPEN: weakref.WeakKeyDictionary[Database, dict[_Terms, _SharedClaim]] = weakref.WeakKeyDictionary()


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

    Calls on the same terms that wait for the queue's gate together share one claim (see
    `SHARED_CLAIM_MAX`): each gets its `max_jobs` in claim order, the first to ask first.

    When the process exports traces, each leased job gets its `lease` span (shared/tracing.py)."""
    hub = db.hub
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_secs
    terms = _Terms(queue, lease_secs, timeout_grace, tenant, worker_id)
    while True:
        seen = hub.epoch(queue)  # read before the claim: a notification after it is never lost
        gate = hub.gate(queue)
        if terms in _OPEN.get(db, ()) or gate.locked():
            # Claims of the queue are under way: wait for a place in one shared claim.
            leases, claimed_at = await _join(db, terms, max_jobs, wait_secs > 0, poll_secs)
        else:
            # A free place and no one waiting for one: claim at once, in this call (taking the
            # place does not yield, so the claim goes out before anything else runs).
            async with gate:
                leases, claimed_at = await _claim_now(db, terms, max_jobs, wait_secs > 0, poll_secs)
        if leases:
            if db.tracer is not None:  # a span per job, from the claim that leased it
                db.tracer.leased(queue, leases, claimed_at)
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


def _join(
    db: Database, terms: _Terms, max_jobs: int, will_wait: bool, poll_secs: float
) -> asyncio.Future[tuple[list[Lease], int]]:
    """This call's place in the open shared claim of its terms (a new one when there is none, or
    when it has no room left): a future of its leases and the claim's start (for the spans)."""
    opened = _OPEN.setdefault(db, {})
    shared = opened.get(terms)
    if shared is None or (shared.asks and max_jobs > shared.room()):
        shared = opened[terms] = _SharedClaim(terms)
        db.start(_claim(db, shared, poll_secs), name="queueflow-claim")
    ask = _Ask(max_jobs, will_wait, asyncio.get_running_loop().create_future())
    shared.asks.append(ask)
    return ask.answer


async def _claim_now(
    db: Database, terms: _Terms, max_jobs: int, will_wait: bool, poll_secs: float
) -> tuple[list[Lease], int]:
    """One claim, its caller holding a place at the queue's gate: its leases, and its start (for
    the spans). A claim whose answer was lost with its connection has its jobs given back."""
    hub = db.hub
    seen = hub.epoch(terms.queue)  # read before the claim: a notification after it is never lost
    if will_wait and hub.known_empty(terms.queue, seen, poll_secs):
        # Only long-polls, and nothing announced since the last empty claim: asking again is
        # waste. (A call that will not wait always asks.)
        return [], 0
    key = uuid.uuid4()
    claimed_at = tracing.now() if db.tracer is not None else 0
    try:
        leases = await jobs_db.claim(
            db.pool,
            terms.queue,
            max_jobs,
            terms.lease_secs,
            terms.timeout_grace,
            next(db.claim_turns),
            key,
            tenant=terms.tenant,
            worker_id=terms.worker_id,
        )
    except Exception as err:
        if is_unavailable(err):  # it may have committed: its jobs must not sit leased
            db.give_back_unanswered_claim(terms.queue, key)
        raise
    if terms.tenant is None:
        # Fewer jobs than asked for, none of them limited, and the claim left nothing claimable
        # behind it: the next long-poll parks without asking, as after an empty claim, until
        # something is announced. (A limited claim may stop at a window of its keys with jobs
        # behind it; a worker key's claim says nothing of other tenants' jobs.)
        hub.claimed(
            terms.queue,
            seen,
            may_have_more=len(leases) >= max_jobs or any(lease.job.config.limits for lease in leases),
        )
    elif leases:
        hub.claimed(terms.queue, seen, may_have_more=True)
    return leases, claimed_at


async def _claim(db: Database, shared: _SharedClaim, poll_secs: float) -> None:
    """Pass the queue's gate, close the shared claim to newcomers, claim for the calls still
    waiting (a call that gave up, cancelled, is left out), and share the jobs out in claim order.
    Jobs of a call that gave up after the claim go back at once (no retry spent)."""
    try:
        async with db.hub.gate(shared.terms.queue):
            _close(db, shared)
            asks = [ask for ask in shared.asks if not ask.answer.done()]
            if not asks:
                return
            try:
                leases, claimed_at = await _claim_now(
                    db,
                    shared.terms,
                    sum(ask.max_jobs for ask in asks),
                    all(ask.will_wait for ask in asks),
                    poll_secs,
                )
            except Exception as err:
                for ask in asks:
                    if not ask.answer.done():
                        ask.answer.set_exception(err)
                return
    except BaseException:  # cancelled (the process is stopping) while waiting or claiming
        _close(db, shared)
        for ask in shared.asks:
            if not ask.answer.done():
                ask.answer.cancel()
        raise
    unheard: list[Lease] = []
    start = 0
    for ask in asks:
        mine = leases[start : start + ask.max_jobs]
        start += ask.max_jobs
        if ask.answer.done():
            unheard.extend(mine)
        else:
            ask.answer.set_result((mine, claimed_at))
    if unheard:
        try:
            await jobs_db.release(db.pool, [(lease.job.id, lease.token) for lease in unheard])
        except Exception:  # their leases then expire and the janitor reclaims them
            log.exception("claim_give_back_failed", queue=shared.terms.queue, jobs=len(unheard))


def _close(db: Database, shared: _SharedClaim) -> None:
    opened = _OPEN.get(db)
    if opened is not None and opened.get(shared.terms) is shared:
        del opened[shared.terms]
