"""Lease calls that wait together for a queue's claim gate, on the same terms, share one claim
(shared/runtime/leasing.py): each gets its share in claim order, a call that gave up gets nothing
and leaves no job leased, and calls on other terms (another worker id) claim for themselves.

The gate's places are held by the test, so the calls queue behind it as they would behind busy
claims; which claim leased a job is its `claim_key`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable

import asyncpg
import pytest

from shared.db import jobs as jobs_db
from shared.db.database import Database
from shared.db.listener import CLAIMS_PER_QUEUE
from shared.domain.jobs import Lease
from shared.runtime import leasing
from shared.runtime.keys import Lifecycle
from tests.support.waiting import eventually


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    opened = await Database.open(database_url, min_connections=1, max_connections=4, migrate=False)
    try:
        yield opened
    finally:
        await opened.close()


async def _jobs(db: asyncpg.Connection, n: int) -> list[str]:
    """`n` due jobs on queue q, in claim order (priority n-1 first)."""
    rows = await db.fetch(
        "INSERT INTO queueflow.jobs (id, queue_name, task_name, config, priority)"
        " SELECT gen_random_uuid(), 'q', 't', '{}'::jsonb, $1 - i FROM generate_series(1, $1) AS i"
        " RETURNING id::text, priority",
        n,
    )
    return [r["id"] for r in sorted(rows, key=lambda r: -r["priority"])]


async def _behind_the_gate(
    database: Database, *calls: Awaitable[list[Lease]]
) -> list[asyncio.Task[list[Lease]]]:
    """Start `calls` while every place of queue q's gate is taken; let them queue up; open it."""
    gate = database.hub.gate("q")
    for _ in range(CLAIMS_PER_QUEUE):
        await gate.acquire()
    tasks = [asyncio.ensure_future(call) for call in calls]
    for _ in range(5):
        await asyncio.sleep(0)
    return tasks


def _open(database: Database) -> None:
    gate = database.hub.gate("q")
    for _ in range(CLAIMS_PER_QUEUE):
        gate.release()


def _lease(database: Database, max_jobs: int, worker_id: str | None = "w1") -> Awaitable[list[Lease]]:
    return leasing.lease_jobs(database, Lifecycle(), "q", max_jobs, 30, 0, 5, worker_id=worker_id)


async def _claim_keys(db: asyncpg.Connection) -> int:
    return await db.fetchval("SELECT count(DISTINCT claim_key) FROM queueflow.jobs WHERE status = 'running'")


async def test_calls_waiting_for_the_gate_share_one_claim_in_claim_order(database: Database, db) -> None:
    order = await _jobs(db, 30)
    tasks = await _behind_the_gate(database, _lease(database, 10), _lease(database, 5), _lease(database, 10))
    _open(database)
    first, second, third = [
        [str(lease.job.id) for lease in leases] for leases in await asyncio.gather(*tasks)
    ]
    assert (first, second, third) == (order[:10], order[10:15], order[15:25])
    assert await _claim_keys(db) == 1
    assert (
        await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status = 'running' AND worker_id = 'w1'")
        == 25
    )


async def test_calls_of_other_workers_claim_for_themselves(database: Database, db) -> None:
    await _jobs(db, 10)
    tasks = await _behind_the_gate(database, _lease(database, 3, "w1"), _lease(database, 4, "w2"))
    _open(database)
    mine, theirs = await asyncio.gather(*tasks)
    assert await _claim_keys(db) == 2
    workers = dict(await db.fetch("SELECT id, worker_id FROM queueflow.jobs WHERE status = 'running'"))
    assert {workers[lease.job.id] for lease in mine} == {"w1"} and len(mine) == 3
    assert {workers[lease.job.id] for lease in theirs} == {"w2"} and len(theirs) == 4


async def test_a_shared_claim_takes_at_most_its_cap(database: Database, db, monkeypatch) -> None:
    monkeypatch.setattr(leasing, "SHARED_CLAIM_MAX", 20)
    await _jobs(db, 30)
    tasks = await _behind_the_gate(database, *(_lease(database, 10) for _ in range(3)))
    _open(database)
    assert [len(leases) for leases in await asyncio.gather(*tasks)] == [10, 10, 10]
    assert await _claim_keys(db) == 2


async def test_a_call_that_gave_up_before_the_claim_is_left_out_of_it(database: Database, db) -> None:
    order = await _jobs(db, 10)
    kept, gone = await _behind_the_gate(database, _lease(database, 3), _lease(database, 4))
    gone.cancel()
    _open(database)
    assert [str(lease.job.id) for lease in await kept] == order[:3]
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status = 'running'") == 3


async def test_a_call_that_gave_up_during_the_claim_has_its_jobs_given_back(
    database: Database, db, monkeypatch
) -> None:
    await _jobs(db, 10)
    real_claim = jobs_db.claim
    tasks: list[asyncio.Task[list[Lease]]] = []

    async def claim_while_the_second_caller_gives_up(*args, **kwargs):
        leases = await real_claim(*args, **kwargs)  # committed: 7 jobs leased
        tasks[1].cancel()
        await asyncio.sleep(0)
        return leases

    monkeypatch.setattr(leasing.jobs_db, "claim", claim_while_the_second_caller_gives_up)
    tasks.extend(await _behind_the_gate(database, _lease(database, 3), _lease(database, 4)))
    _open(database)
    kept = await tasks[0]
    with pytest.raises(asyncio.CancelledError):
        await tasks[1]

    async def given_back() -> bool:
        return await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status = 'pending'") == 7

    await eventually(given_back, timeout=10, message="the second caller's jobs are given back")
    running = {r["id"] for r in await db.fetch("SELECT id FROM queueflow.jobs WHERE status = 'running'")}
    assert running == {lease.job.id for lease in kept} and len(running) == 3
    # given back, not failed: no retry spent
    assert await db.fetchval("SELECT sum(retry_count) FROM queueflow.jobs") == 0


async def test_a_failed_shared_claim_fails_every_call_in_it(database: Database, monkeypatch) -> None:
    async def refused(*args, **kwargs):
        raise asyncpg.PostgresError("no")

    monkeypatch.setattr(leasing.jobs_db, "claim", refused)
    tasks = await _behind_the_gate(database, _lease(database, 3), _lease(database, 4))
    _open(database)
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        assert isinstance(outcome, asyncpg.PostgresError)


async def test_a_call_with_a_free_place_sends_its_claim_before_anything_else_runs(
    database: Database, db, monkeypatch
) -> None:
    """The in-process worker starts a claim's jobs in the event loop's next turn, counting on its
    next claim being sent first: a call that finds a free place claims in its own first step."""
    await _jobs(db, 3)
    order: list[str] = []
    real_claim = jobs_db.claim

    async def noting_claim(*args, **kwargs):
        order.append("claim sent")
        return await real_claim(*args, **kwargs)

    monkeypatch.setattr(leasing.jobs_db, "claim", noting_claim)
    asyncio.get_running_loop().call_soon(order.append, "scheduled before the call")
    assert len(await _lease(database, 3)) == 3
    assert order == ["claim sent", "scheduled before the call"]


async def test_closing_the_database_waits_for_a_shared_claim_to_give_back_what_no_one_heard(
    database_url: str, db, monkeypatch
) -> None:
    await _jobs(db, 5)
    closing_db = await Database.open(database_url, min_connections=1, max_connections=4, migrate=False)
    real_claim = jobs_db.claim
    claimed, answer = asyncio.Event(), asyncio.Event()

    async def claim_then_wait(*args, **kwargs):
        leases = await real_claim(*args, **kwargs)  # committed: 5 jobs leased
        claimed.set()
        await answer.wait()
        return leases

    monkeypatch.setattr(leasing.jobs_db, "claim", claim_then_wait)
    [call] = await _behind_the_gate(closing_db, _lease(closing_db, 5))
    _open(closing_db)
    await claimed.wait()
    call.cancel()  # its caller is gone (the process is stopping)
    closing = asyncio.ensure_future(closing_db.close())
    # Time enough to close the pool under the claim (which a close that does not wait does); the
    # one bounded wait here.
    done, _ = await asyncio.wait([closing], timeout=1.0)
    answer.set()
    await closing
    assert not done  # it waited for the claim
    # given back before the pool closed, not left leased until the janitor's reclaim spends a retry
    rows = await db.fetch("SELECT status, retry_count FROM queueflow.jobs")
    assert sorted((r["status"], r["retry_count"]) for r in rows) == [("pending", 0)] * 5
