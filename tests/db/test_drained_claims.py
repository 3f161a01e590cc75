"""A claim of every tenant's jobs that took fewer than it asked for, none of them limited, left the
queue with nothing claimable: the hub records the queue as empty, so the next long-poll parks
without a claim of its own (one database transaction less per job delivered to a parked worker),
until something is announced (shared/runtime/leasing.py, `_claim_now`). A full claim, a claim that
leased limited jobs, and a worker key's claim record nothing of the kind (a worker key's claim
records only its own tenant's jobs as drained: tests/unit/test_hub.py, tests/protocol/test_handoff.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import asyncpg
import pytest

from shared.db.database import Database
from shared.runtime import leasing
from shared.runtime.keys import Lifecycle
from tests.support.waiting import eventually


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    opened = await Database.open(database_url, min_connections=1, max_connections=4, migrate=False)
    try:
        await eventually(lambda: opened.hub.connected)
        yield opened
    finally:
        await opened.close()


async def _jobs(
    database: Database, db: asyncpg.Connection, n: int, *, limited: bool = False, tenant: str | None = None
) -> None:
    """`n` due jobs on queue q, inserted (with their notification) and announced to the hub."""
    start = database.hub.epoch("q")
    await db.execute(
        "INSERT INTO queueflow.jobs (id, queue_name, task_name, config, tenant_id)"
        " SELECT gen_random_uuid(), 'q', 't', $2::jsonb, $3 FROM generate_series(1, $1)",
        n,
        '{"limits": ["k"]}' if limited else "{}",  # (the insert trigger fills limit_keys)
        tenant,
    )
    await eventually(lambda: database.hub.epoch("q") > start)


def _known_empty(database: Database) -> bool:
    return database.hub.known_empty("q", database.hub.epoch("q"), max_age=60)


async def _lease(
    database: Database, max_jobs: int, *, tenant: str | None = None, wait_secs: float = 0
) -> int:
    leases = await leasing.lease_jobs(database, Lifecycle(), "q", max_jobs, 30, wait_secs, 60, tenant=tenant)
    return len(leases)


async def test_a_claim_that_took_fewer_than_it_asked_for_records_the_queue_as_empty(database, db) -> None:
    await _jobs(database, db, 3)
    assert await _lease(database, 10) == 3
    assert _known_empty(database)
    # ... until a job is announced: the next long-poll asks again (it would park, were the queue
    # still recorded as empty), and finds it.
    await _jobs(database, db, 1)
    assert await _lease(database, 10, wait_secs=5) == 1


async def test_a_parked_long_poll_after_a_draining_claim_is_woken_by_the_next_job(database, db) -> None:
    await _jobs(database, db, 2)
    assert await _lease(database, 10) == 2
    parked = asyncio.ensure_future(leasing.lease_jobs(database, Lifecycle(), "q", 10, 30, 5, 60))
    await eventually(lambda: database.hub.waiting("q") == 1)
    await _jobs(database, db, 1)
    assert len(await asyncio.wait_for(parked, 5)) == 1


async def test_a_full_claim_leaves_the_queue_unknown(database, db) -> None:
    await _jobs(database, db, 5)
    assert await _lease(database, 5) == 5
    assert not _known_empty(database)


async def test_a_claim_that_leased_limited_jobs_leaves_the_queue_unknown(database, db) -> None:
    # A limited claim may stop at a window of its keys with more claimable jobs behind it.
    await _jobs(database, db, 2, limited=True)
    assert await _lease(database, 10) == 2
    assert not _known_empty(database)


async def test_a_worker_keys_claim_records_nothing_of_other_tenants_jobs(database, db) -> None:
    await _jobs(database, db, 2, tenant="a")
    await _jobs(database, db, 2, tenant="b")
    assert await _lease(database, 10, tenant="a") == 2
    assert not _known_empty(database)
    assert await _lease(database, 10) == 2
