"""Claiming with a long-poll, shared by the API's lease route and the in-process workers."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
import weakref
from collections import deque
from dataclasses import dataclass, field

import structlog

from shared import metrics, tracing
from shared.db import jobs as jobs_db
from shared.db.database import Database
from shared.db.pool import is_unavailable
from shared.domain.admission import Occupancy
from shared.domain.jobs import Lease, NewJob
from shared.runtime.keys import Lifecycle

log = structlog.get_logger("queueflow.leasing")

# Lease calls that wait together for a queue's claim gate share one claim when they lease on the
# same terms (worker id, tenant, lease length): up to this many jobs for one claim. A claim's fixed
# cost is paid once for all of them, and the gate's two places go to claims many times larger
# instead of queueing small ones (ADR 0021, with what it bought).
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
    parking: Occupancy | None = None,
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

    When the process exports traces, each leased job gets its `lease` span (shared/tracing.py).

    With `parking` (the API's caps), each wait takes a place in it: a call that claimed nothing
    and finds no place raises the refusal (429 or 503) instead of parking. It claims before, so a
    worker past the cap still gets every job that is due; only the wait is refused
    (docs/protocol.md, "Caps on streams and long-polls")."""
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
            return _leased(db, queue, leases, claimed_at, full=len(leases) == max_jobs)
        remaining = deadline - loop.time()
        if remaining <= 0 or lifecycle.draining:
            return []
        handed = await _park(db, terms, seen, min(remaining, poll_secs), poll_secs, parking)
        if handed:
            # The enqueue's insert leased it: the queue had nothing else (no wake-up to pass on).
            return _leased(db, queue, handed, tracing.now() if db.tracer is not None else 0, full=False)


def _leased(db: Database, queue: str, leases: list[Lease], claimed_at: int, *, full: bool) -> list[Lease]:
    """A lease call's jobs, with their spans and wait times observed; `full`: the claim took all
    it asked for, so more may be waiting and the wake-up is passed on."""
    if db.tracer is not None:  # a span per job, from the claim that leased it
        db.tracer.leased(queue, leases, claimed_at)
    # started_at is this claim; a redelivery has no wait to measure
    metrics.observe_many(
        metrics.QUEUE_WAIT.labels(metrics.queue_label(queue)),
        [
            max(0.0, (lease.job.started_at - lease.job.scheduled_at).total_seconds())
            for lease in leases
            if lease.job.delivery_count == 1 and lease.job.started_at is not None
        ],
    )
    if full:
        db.hub.poke(queue)  # more may be waiting: pass the wake-up on
    return leases


async def _park(
    db: Database, terms: _Terms, seen: int, timeout: float, poll_secs: float, parking: Occupancy | None
) -> list[Lease]:
    """Wait for the queue's wake-up (then claim again) or for a job handed off by an enqueue in
    this process: that job's lease, else []. The wait holds a place in `parking` (none left: its
    refusal is raised)."""
    if parking is not None:
        parking.take(terms.tenant)
    hub = db.hub
    metrics.LONG_POLL_WAITERS.inc()
    idle = _Idle(terms, poll_secs, asyncio.get_running_loop().create_future())
    _IDLE.setdefault(db, {}).setdefault(terms.queue, deque()).append(idle)
    try:
        await hub.wait(terms.queue, seen, timeout, observe=terms.tenant is not None, waiter=idle.answer)
    finally:
        metrics.LONG_POLL_WAITERS.dec()
        _forget(db, idle)
        if parking is not None:
            parking.give_back(terms.tenant)
    if not idle.answer.done() or idle.answer.cancelled():
        return []
    return idle.answer.result() or []


# --- the hand-off --------------------------------------------------------------------------------
#
# A lease call that parks on its queue may be answered by an enqueue in the same process: the job
# is inserted already leased on the call's terms, in the insert's own statement and commit
# (jobs.insert_handed_off), and the call answered with it. The job skips its notification, the
# wake-up and a claim's commit: the latency between a POST and a parked worker is one durable
# commit instead of two in a row (ADR 0018). Only when nothing else the call could take is
# claimable, so no job is passed over: for a call of every tenant's jobs, the queue recorded empty;
# for a worker key's, its tenant's jobs of the queue (and only that tenant's jobs go to it). Only a
# job a claim would lease at once: due, without limits (a claim takes their slots) and without an
# idempotency or unique key (its insert may keep it out). Should the call have given up by the
# time the job is written, the job is given back at once, as a claim's unheard jobs are.


@dataclass(eq=False, slots=True)
class _Idle:
    """A parked lease call an enqueue may answer: `answer` gets None from the hub's wake-up, or
    the jobs handed to it."""

    terms: _Terms
    poll_secs: float
    answer: asyncio.Future[list[Lease] | None]


# Per database and queue: the parked lease calls, oldest first.
_IDLE: weakref.WeakKeyDictionary[Database, dict[str, deque[_Idle]]] = weakref.WeakKeyDictionary()


def _forget(db: Database, idle: _Idle) -> None:
    idles = _IDLE.get(db, {}).get(idle.terms.queue)
    if idles is not None:
        with contextlib.suppress(ValueError):
            idles.remove(idle)
        if not idles:
            del _IDLE[db][idle.terms.queue]


def _take_idle(db: Database, queue: str, tenant: str | None) -> _Idle | None:
    """The oldest parked call that may take a job of `tenant` on `queue` at once, taken out of its
    wake-ups: a call of every tenant's jobs when the queue is known empty, or a call of only
    `tenant`'s jobs (a worker key's) when that tenant's are. None when there is none."""
    idles = _IDLE.get(db, {}).get(queue)
    if not idles:
        return None
    hub = db.hub
    epoch = hub.epoch(queue)
    for idle in idles:
        if idle.answer.done():
            continue
        mine = idle.terms.tenant
        if mine is None:
            if not hub.known_empty(queue, epoch, idle.poll_secs):
                continue
        elif mine != tenant or not hub.tenant_known_empty(queue, mine, epoch, idle.poll_secs):
            continue
        idles.remove(idle)
        hub.withdraw(queue, idle.answer)
        return idle
    return None


def may_hand_off(job: NewJob) -> bool:
    """Whether a claim would lease `job` the moment it is written (see "the hand-off")."""
    return (
        job.run_at is None
        and not job.idempotency_key
        and not job.config.unique
        and not job.config.limits
        and job.workflow_id is None
    )


async def insert_handing_off(db: Database, tenant: str | None, job: NewJob) -> uuid.UUID:
    """Insert one job (concurrent ones share a statement), handed off to a lease call parked on
    its queue when there is one it may go to; its id."""
    idle = _take_idle(db, job.queue, tenant) if may_hand_off(job) else None
    if idle is None:
        return await db.inserter.insert(tenant, job)
    terms = idle.terms
    handoff = jobs_db.Handoff(terms.lease_secs, terms.timeout_grace, terms.worker_id)
    inserted: asyncio.Future[uuid.UUID] = asyncio.get_running_loop().create_future()

    def written(answer: jobs_db.Inserted | BaseException) -> None:
        # Called by the group commit, whether or not this enqueue's caller still waits.
        if isinstance(answer, BaseException):
            _answer(idle, [])  # it claims as usual
            if is_unavailable(answer):  # the insert may have committed, leased to no one
                db.give_back_unanswered_claim(job.queue, handoff.key)
            if not inserted.done():
                inserted.set_exception(answer)
            return
        job_id, lease = answer
        if _answer(idle, [lease] if lease is not None else []):
            if lease is not None:
                metrics.JOBS_HANDED_OFF.inc()
        elif lease is not None:
            db.start(_give_back(db, job.queue, [lease]), name="queueflow-handoff-give-back")
        if not inserted.done():
            inserted.set_result(job_id)

    db.inserter.hand_off(tenant, job, handoff, written)
    return await inserted


def _answer(idle: _Idle, leases: list[Lease]) -> bool:
    """Wake the parked call with `leases` ([]: it claims as usual); False when it gave up."""
    if idle.answer.done():
        return False
    idle.answer.set_result(leases)
    return True


async def _give_back(db: Database, queue: str, leases: list[Lease]) -> None:
    try:
        await jobs_db.release(db.pool, [(lease.job.id, lease.token) for lease in leases])
    except Exception:  # their leases then expire and the janitor reclaims them
        log.exception("handoff_give_back_failed", queue=queue, jobs=len(leases))


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
    # Fewer jobs than asked for, none of them limited: the claim left nothing it could take
    # claimable behind it. (A limited claim may stop at a window of its keys with jobs behind it.)
    more = len(leases) >= max_jobs or any(lease.job.config.limits for lease in leases)
    if terms.tenant is None:
        # The next long-poll parks without asking, as after an empty claim, until something is
        # announced.
        hub.claimed(terms.queue, seen, may_have_more=more)
    else:
        # A worker key's claim says that of its own tenant's jobs only (the hand-off's condition
        # for that tenant) and, when it found some, that the queue is not empty.
        hub.tenant_claimed(terms.queue, terms.tenant, seen, may_have_more=more)
        if leases:
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
