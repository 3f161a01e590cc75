"""Flow-control repository: a tenant's limit policies with their live figures, and the janitor's
share of the bookkeeping (folding released slots, waking queues whose rate has room again).

The claim itself enforces the policies (queueflow.claim_limited, migration 12, which says how the
tables fit together).
"""

from __future__ import annotations

import asyncpg

from shared.db import audit
from shared.db.pool import Executor, Pool
from shared.db.queries import Q
from shared.domain.errors import NotFound
from shared.domain.limits import KeyFigures, LimitPolicy, Rate, RepairedKey


def to_policy(r: asyncpg.Record) -> LimitPolicy:
    rate = None if r["rate_count"] is None else Rate(r["rate_count"], r["rate_per_secs"])
    return LimitPolicy(
        key=r["key"],
        concurrency=r["concurrency"],
        rate=rate,
        running=max(0, r["running"]),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        rate_available=r["rate_available"],
    )


async def put(pool: Pool, tenant: str, key: str, concurrency: int | None, rate: Rate | None) -> LimitPolicy:
    """Create or replace the policy of `key`; it applies from the next claim."""
    async with audit.change(pool, atomic=True) as conn:
        await conn.execute(Q.lock_tenant_limits, tenant)
        await conn.execute(
            Q.put_limit_policy,
            tenant,
            key,
            concurrency,
            None if rate is None else rate.count,
            None if rate is None else rate.per_secs,
        )
        await conn.execute(Q.refresh_limit_state, tenant, key)
    return await get(pool, tenant, key)


async def delete(pool: Pool, tenant: str, key: str) -> None:
    """Remove the policy of `key`: its keys fall back to a wildcard's policy, or to none."""
    async with audit.change(pool, atomic=True) as conn:
        await conn.execute(Q.lock_tenant_limits, tenant)
        if await conn.fetchval(Q.delete_limit_policy, tenant, key) is None:
            raise NotFound("limit", key)
        await conn.execute(Q.refresh_limit_state, tenant, key)


async def get(db: Executor, tenant: str, key: str) -> LimitPolicy:
    row = await db.fetchrow(Q.limit_policies, tenant, key)
    if row is None:
        raise NotFound("limit", key)
    return to_policy(row)


async def list_policies(db: Executor, tenant: str) -> list[LimitPolicy]:
    return [to_policy(r) for r in await db.fetch(Q.limit_policies, tenant, None)]


# --- the janitor ---------------------------------------------------------------------------------


async def fold_releases(db: Executor, max_keys: int) -> int:
    """Fold released slots into the running counts of keys no claim is visiting; how many keys."""
    return int(await db.fetchval(Q.fold_limit_releases, max_keys) or 0)


async def wake_limited_queues(db: Executor) -> int:
    """Wake the queues of keys whose rate has room again; how many queues were woken."""
    return int(await db.fetchval(Q.wake_limited_queues) or 0)


async def repair_running_counts(db: Executor, max_keys: int) -> list[RepairedKey]:
    """Set right up to `max_keys` keys whose recorded running count differs from their running
    jobs (migration 34); the keys set right."""
    return [
        RepairedKey(r["tenant_key"], r["key"], r["recorded"], r["actual"])
        for r in await db.fetch(Q.repair_limit_state, max_keys)
    ]


async def prune_idle_keys(
    db: Executor, after: tuple[str, str], max_keys: int, idle_secs: float
) -> tuple[int, int, tuple[str, str] | None]:
    """Delete the state rows of idle keys among the next `max_keys` after `after` (key order):
    how many were looked at and deleted, and where the next page starts (None: past the last)."""
    r = await db.fetchrow(Q.prune_limit_state, after[0], after[1], max_keys, idle_secs)
    assert r is not None  # (a function's one row)
    start = None if r["last_tenant"] is None else (r["last_tenant"], r["last_key"])
    return r["seen"], r["pruned"], start


async def key_figures(db: Executor, max_keys: int) -> list[KeyFigures]:
    return [
        KeyFigures(r["tenant_key"], r["key"], max(0, r["running"]), r["throttled"])
        for r in await db.fetch(Q.limit_key_figures, max_keys)
    ]
