"""Push delivery's statements (migration 38; docs/push.md): a tenant's endpoints and their bound
queues, the pushers' claims under each endpoint's concurrency, failures with the receiver's retry
delay, the circuit breaker, and the delivery history."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from shared.db import audit
from shared.db import jobs as jobs_db
from shared.db.batcher import GroupCommit
from shared.db.pool import Executor, Pool
from shared.db.queries import Q
from shared.domain.errors import Conflict, DomainError, NotFound
from shared.domain.jobs import JobStatus, Lease
from shared.domain.push import (
    Delivery,
    EndpointChange,
    NewPushEndpoint,
    PushedQueue,
    PushEndpoint,
    breaker_of,
    queue_taken,
)
from shared.tracing import Tracer


def _endpoint(r: asyncpg.Record) -> PushEndpoint:
    return PushEndpoint(
        id=r["id"],
        name=r["name"],
        url=r["url"],
        queues=list(r["queues"]),
        concurrency=r["concurrency"],
        timeout_secs=r["timeout_secs"],
        paused=r["paused"],
        breaker=breaker_of(r["failures"], r["open_until"], datetime.now(UTC)),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        headers=r["headers"] or None,
        previous_secret_expires_at=r["previous_secret_expires_at"],
    )


def _name_taken(name: str) -> Conflict:
    return Conflict(f"a push endpoint named {name!r} already exists")


async def _bind(conn: Executor, tenant: str, endpoint_id: uuid.UUID, queues: list[str]) -> None:
    bound = {r["queue_name"] for r in await conn.fetch(Q.bind_push_queues, tenant, endpoint_id, queues)}
    if len(bound) < len(queues):
        holder = await conn.fetchrow(Q.push_queue_holder, tenant, queues, endpoint_id)
        if holder is None:  # taken and let go meanwhile: still refused, the caller may try again
            raise Conflict("a queue of the endpoint is bound to another push endpoint")
        raise queue_taken(holder["queue_name"], holder["name"])


async def create(pool: Pool, tenant: str, new: NewPushEndpoint, secret: str) -> PushEndpoint:
    """Create the endpoint and bind its queues; Conflict for a name the tenant already uses or a
    queue another of its endpoints drains."""
    endpoint_id = uuid.uuid4()
    async with audit.change(pool, atomic=True) as conn:
        audit.made(endpoint_id)
        made = await conn.fetchval(
            Q.insert_push_endpoint,
            endpoint_id,
            tenant,
            new.name,
            new.url,
            new.concurrency,
            new.timeout_secs,
            new.headers,
            secret,
        )
        if made is None:
            raise _name_taken(new.name)
        await _bind(conn, tenant, endpoint_id, new.queues)
        await conn.execute(Q.notify_push_change, str(endpoint_id))
        row = await conn.fetchrow(Q.get_push_endpoint, endpoint_id, tenant)
    assert row is not None
    return _endpoint(row)


async def get(db: Executor, tenant: str, endpoint_id: uuid.UUID) -> PushEndpoint:
    row = await db.fetchrow(Q.get_push_endpoint, endpoint_id, tenant)
    if row is None:
        raise NotFound("push endpoint", endpoint_id)
    return _endpoint(row)


async def list_endpoints(db: Executor, tenant: str) -> list[PushEndpoint]:
    return [_endpoint(r) for r in await db.fetch(Q.list_push_endpoints, tenant)]


async def update(pool: Pool, tenant: str, endpoint_id: uuid.UUID, change: EndpointChange) -> PushEndpoint:
    async with audit.change(pool, atomic=True) as conn:
        try:
            updated = await conn.fetchval(
                Q.update_push_endpoint,
                endpoint_id,
                tenant,
                change.name,
                change.url,
                change.concurrency,
                change.timeout_secs,
                change.headers,
                change.paused,
            )
        except asyncpg.UniqueViolationError:
            raise _name_taken(change.name or "") from None
        if updated is None:
            raise NotFound("push endpoint", endpoint_id)
        if change.queues is not None:
            await conn.execute(Q.unbind_push_queues, endpoint_id, change.queues)
            await _bind(conn, tenant, endpoint_id, change.queues)
        await conn.execute(Q.notify_push_change, str(endpoint_id))
        row = await conn.fetchrow(Q.get_push_endpoint, endpoint_id, tenant)
    assert row is not None
    return _endpoint(row)


async def rotate_secret(
    pool: Pool, tenant: str, endpoint_id: uuid.UUID, secret: str, previous_until: datetime | None
) -> PushEndpoint:
    async with audit.change(pool, atomic=True) as conn:
        if await conn.fetchval(Q.rotate_push_secret, endpoint_id, tenant, secret, previous_until) is None:
            raise NotFound("push endpoint", endpoint_id)
        await conn.execute(Q.notify_push_change, str(endpoint_id))
        row = await conn.fetchrow(Q.get_push_endpoint, endpoint_id, tenant)
    assert row is not None
    return _endpoint(row)


async def delete(pool: Pool, tenant: str, endpoint_id: uuid.UUID) -> None:
    async with audit.change(pool, atomic=True) as conn:
        if await conn.fetchval(Q.delete_push_endpoint, endpoint_id, tenant) is None:
            raise NotFound("push endpoint", endpoint_id)
        await conn.execute(Q.notify_push_change, str(endpoint_id))


async def pushed_queues(db: Executor) -> dict[str, PushedQueue]:
    """Every bound queue: the tenants that bound it, and whether they are all its tenants."""
    found: dict[str, tuple[set[str], bool]] = {}
    for r in await db.fetch(Q.pushed_queues):
        found.setdefault(r["queue_name"], (set(), r["all_pushed"]))[0].add(r["tenant_key"])
    return {queue: PushedQueue(frozenset(tenants), everyone) for queue, (tenants, everyone) in found.items()}


async def recent_deliveries(db: Executor, tenant: str, endpoint_id: uuid.UUID, limit: int) -> list[Delivery]:
    await get(db, tenant, endpoint_id)  # another tenant's endpoint is not found
    return [_delivery(r) for r in await db.fetch(Q.recent_push_deliveries, endpoint_id, tenant, limit)]


async def job_deliveries(db: Executor, job_id: uuid.UUID) -> list[Delivery]:
    return [_delivery(r) for r in await db.fetch(Q.job_push_deliveries, job_id)]


def _delivery(r: asyncpg.Record) -> Delivery:
    return Delivery(
        endpoint_id=r["endpoint_id"],
        job_id=r["job_id"],
        attempt=r["attempt"],
        webhook_id=r["webhook_id"],
        outcome=r["outcome"],
        latency_ms=r["latency_ms"],
        delivered_at=r["delivered_at"],
        status=r["status"],
        body=r["body"],
        error=r["error"],
    )


# --- the pushers ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """An endpoint as a pusher delivers to it."""

    id: uuid.UUID
    tenant: str
    name: str
    url: str
    queues: tuple[str, ...]
    concurrency: int
    timeout_secs: int
    headers: dict[str, str]
    secrets: tuple[str, ...]  # the current secret first, then one rotated out that still signs
    previous_until: datetime | None  # until when the second of `secrets` signs
    failures: int
    open_until: datetime | None
    open: bool
    version: datetime  # the row's updated_at: every change of what a delivery is sent with moves it

    def signing_secrets(self, now: datetime) -> tuple[str, ...]:
        """The secrets that sign a delivery sent at `now`: a rotated-out one only until its grace
        ends, however long ago this was read."""
        if self.previous_until is not None and now >= self.previous_until:
            return self.secrets[:1]
        return self.secrets


def _target(r: asyncpg.Record) -> Target:
    return Target(
        id=r["id"],
        tenant=r["tenant_key"],
        name=r["name"],
        url=r["url"],
        queues=tuple(r["queues"]),
        concurrency=r["concurrency"],
        timeout_secs=r["timeout_secs"],
        headers=r["headers"] or {},
        secrets=tuple(s for s in (r["secret"], r["previous_secret"]) if s),
        previous_until=r["previous_secret_until"],
        failures=r["failures"],
        open_until=r["open_until"],
        open=r["open"],
        version=r["updated_at"],
    )


async def active_targets(db: Executor) -> list[Target]:
    return [_target(r) for r in await db.fetch(Q.active_push_endpoints, None)]


@dataclass(frozen=True, slots=True)
class Claimed:
    """What a claim for an endpoint took."""

    leases: list[Lease]
    free: int  # how many more it could have taken (0: full, paused, gone or its breaker open)
    # The endpoint read again in the claim when it had changed since the caller's version (the
    # claim's jobs go out as it is now), else None.
    changed: Target | None = None


async def claim(
    pool: Pool,
    known: Target,
    queue: str,
    want: int,
    lease_secs: int,
    rotation: int,
    worker_id: str,
) -> Claimed:
    """Claim up to `want` jobs of `known`'s tenant on `queue` for the endpoint, through the claim
    path every lease takes (jobs.claim: limits, priorities, scheduling, pauses), never more than
    the endpoint's concurrency minus the deliveries it holds in any pusher; the jobs are held by
    the endpoint in the same transaction. When the endpoint changed since `known` was read (its
    version moved), it is read again under the claim's lock and answered beside the jobs."""
    endpoint_id = known.id
    async with pool.acquire() as conn, conn.transaction():
        version = await conn.fetchval(Q.lock_push_endpoint, endpoint_id)
        if version is None:
            return Claimed([], 0)  # paused or gone
        changed = None
        if version != known.version:
            row = await conn.fetchrow(Q.active_push_endpoints, endpoint_id)
            changed = _target(row) if row is not None else None
        slots = await conn.fetchrow(Q.push_slots, endpoint_id)
        if slots is None or slots["open"]:
            return Claimed([], 0, changed)
        free = slots["concurrency"] - slots["held"]
        if slots["tripped"]:  # half-open: one delivery at a time says whether it recovered
            free = min(free, 1 - slots["held"])
        take = min(want, free)
        if take <= 0:
            return Claimed([], 0, changed)
        leases = await jobs_db.claim(
            conn, queue, take, lease_secs, None, rotation, tenant=known.tenant, worker_id=worker_id
        )
        if leases:
            await conn.execute(
                Q.hold_push_jobs,
                endpoint_id,
                [lease.job.id for lease in leases],
                [lease.token for lease in leases],
            )
    return Claimed(leases, free - len(leases), changed)


async def fail(
    db: Executor,
    job_id: uuid.UUID,
    token: uuid.UUID,
    error: str,
    retryable: bool,
    delay_secs: int | None,
    reason: str | None = None,
) -> JobStatus:
    """A delivery's failure through the job's retry policy (`delay_secs`: the receiver's
    Retry-After instead of the backoff): `retrying` or `failed`. A job no longer running under the
    lease (cancelled, reclaimed) raises Conflict or NotFound."""
    status = await jobs_db.fail_held(db, job_id, token, error, retryable, reason, delay_secs)
    if status is None:
        raise await jobs_db.lease_refusal(db, job_id, token)
    return status


async def endpoint_failed(db: Executor, endpoint_id: uuid.UUID) -> int:
    """One more retryable failure in a row: how many now (0: the endpoint is gone)."""
    return int(await db.fetchval(Q.push_endpoint_failed, endpoint_id) or 0)


async def open_breaker(db: Executor, endpoint_id: uuid.UUID, secs: float) -> datetime | None:
    opened: datetime | None = await db.fetchval(Q.open_push_breaker, endpoint_id, secs)
    return opened


async def close_breaker(db: Executor, endpoint_id: uuid.UUID) -> None:
    await db.execute(Q.close_push_breaker, endpoint_id)


async def prune_deliveries(db: Executor, batch: int) -> int:
    status = await db.execute(Q.prune_push_deliveries, batch)
    return int(status.split()[-1])


# One delivery's history row: endpoint, job, attempt, webhook id, status, latency (ms), kept body,
# outcome, error.
DeliveryRow = tuple[uuid.UUID, uuid.UUID, int, str, int | None, float, str | None, str, str | None]


async def _insert_deliveries(db: Executor, rows: list[DeliveryRow]) -> None:
    columns = list(zip(*rows, strict=True))
    await db.execute(Q.insert_push_deliveries, *[list(c) for c in columns])


class DeliveryWriter(GroupCommit[DeliveryRow, None]):
    """The delivery history: one INSERT ... unnest for every delivery recorded meanwhile."""

    name = "push-deliveries"

    async def _write_many(self, items: list[DeliveryRow]) -> list[BaseException | None]:
        await _insert_deliveries(self.pool, items)
        return [None] * len(items)


class CompletedDeliveries(GroupCommit[tuple[DeliveryRow, jobs_db.Completion], None]):
    """Deliveries whose answer completes their job: every one in flight written in one transaction
    (one commit), their history rows first, then their completions in one statement (the
    completer's, jobs.complete_many). Each caller gets its completion's answer: None, or the
    domain error of a job no longer its lease's (its history row is written all the same)."""

    name = "push-completions"

    def __init__(self, pool: Pool, tracer: Tracer | None = None, max_batch: int = 500) -> None:
        super().__init__(pool, max_batch)
        self.tracer = tracer

    async def _write_many(
        self, items: list[tuple[DeliveryRow, jobs_db.Completion]]
    ) -> list[BaseException | None]:
        async with self.pool.acquire() as conn, conn.transaction():
            await _insert_deliveries(conn, [row for row, _ in items])
            return list(await jobs_db.complete_many(conn, [done for _, done in items], self.tracer))


def is_lost(err: BaseException) -> bool:
    """A write refused because the job is no longer this delivery's (cancelled or reclaimed)."""
    return isinstance(err, DomainError)
