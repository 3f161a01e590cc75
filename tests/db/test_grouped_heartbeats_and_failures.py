"""Heartbeats (without progress) and failures reported over the worker protocol are group-committed
like completions: the ones in flight share one statement or one transaction, yet each caller gets
the answer the one-at-a-time write would give, and one bad item fails only its own caller."""

import asyncio
import uuid

import pytest

from shared.db import jobs as jobs_db
from shared.domain.errors import Conflict, NotFound
from shared.domain.jobs import JobStatus
from tests.protocol.helpers import cancel, create_job, dead_letters, fail, heartbeat, job_row, lease
from tests.support.api import database_of

LOCKED_UNTIL = "SELECT id, locked_until FROM queueflow.jobs WHERE id = ANY($1)"


async def _locks(db, jobs: list[uuid.UUID]) -> dict[uuid.UUID, object]:
    return {r["id"]: r["locked_until"] for r in await db.fetch(LOCKED_UNTIL, jobs)}


async def _leased(client, n: int) -> list[tuple[uuid.UUID, uuid.UUID]]:
    """`n` jobs leased for 30 s (the lease call's default)."""
    for i in range(n):
        await create_job(client, payload={"i": i}, max_retries=1)
    items = await lease(client, max_jobs=n)
    assert len(items) == n
    return [(uuid.UUID(i["job"]["id"]), uuid.UUID(i["lease_token"])) for i in items]


async def test_heartbeats_in_one_group_each_get_the_answer_of_their_own_job(api, db):
    client = await api()
    (a, ta), (b, _), (c, tc) = await _leased(client, 3)
    assert await cancel(client, str(c)) == 204
    before = await _locks(db, [a, b])

    answers = await jobs_db.heartbeat_many(
        database_of(client).pool,
        [(a, ta, 3000), (b, uuid.uuid4(), 3000), (c, tc, 3000), (uuid.uuid4(), ta, 3000), (a, None, 60)],
        "lost",
    )

    assert answers[0] is JobStatus.RUNNING
    assert isinstance(answers[1], Conflict) and answers[1].message.endswith("lost")
    assert answers[2] is JobStatus.CANCELLED  # the holder learns it must stop
    assert isinstance(answers[3], NotFound)
    assert isinstance(answers[4], Conflict)  # a token that is no UUID holds nothing
    after = await _locks(db, [a, b])
    # Leased for 30 s, then for 3,000 from a later moment: at least 2,970 s more.
    assert (after[a] - before[a]).total_seconds() >= 2970
    assert after[b] == before[b]


async def test_each_heartbeat_of_a_group_sets_its_own_lease(api, db):
    client = await api()
    (a, ta), (b, tb) = await _leased(client, 2)

    answers = await jobs_db.heartbeat_many(database_of(client).pool, [(a, ta, 100), (b, tb, 3000)], "lost")

    assert answers == [JobStatus.RUNNING, JobStatus.RUNNING]
    locks = await _locks(db, [a, b])
    assert (locks[b] - locks[a]).total_seconds() == 2900  # (one statement: one `now()`)


async def test_failures_in_one_group_each_get_the_answer_of_their_own_job(api, db):
    client = await api()
    (a, ta), (b, tb), (c, _) = await _leased(client, 3)

    async with database_of(client).pool.acquire() as conn:
        answers = await jobs_db.fail_many(
            conn,
            [
                (a, ta, "try again", True),
                (b, tb, "give up", False),
                (c, uuid.uuid4(), "not mine", True),
                (uuid.uuid4(), ta, "no such job", True),
                (c, None, "no token", True),
            ],
        )

    assert answers[:2] == [JobStatus.RETRYING, JobStatus.FAILED]
    assert isinstance(answers[2], Conflict) and isinstance(answers[4], Conflict)
    assert isinstance(answers[3], NotFound)
    assert (await job_row(db, str(a)))["status"] == "retrying"
    assert (await job_row(db, str(b)))["error_message"] == "give up"
    assert [r["reason"] for r in await dead_letters(db, str(b))] == ["non_retryable"]
    assert (await job_row(db, str(c)))["status"] == "running"


async def test_a_job_failed_twice_in_one_group_is_failed_once_and_the_replay_answered(api, db):
    client = await api()
    [(a, ta), (b, tb)] = await _leased(client, 2)

    async with database_of(client).pool.acquire() as conn:
        answers = await jobs_db.fail_many(
            conn,
            [
                (a, ta, "boom", False),
                (a, ta, "boom", False),
                (b, uuid.uuid4(), "stale", False),
                (b, tb, "boom", False),
            ],
        )

    assert answers[:2] == [JobStatus.FAILED, JobStatus.FAILED]
    assert isinstance(answers[2], Conflict) and answers[3] is JobStatus.FAILED
    assert len(await dead_letters(db, str(a))) == 1
    assert await db.fetchval("SELECT count(*) FROM queueflow.job_attempts WHERE job_id = $1", a) == 1


async def test_a_failure_the_database_refuses_fails_only_its_own_caller(api, db):
    """The group's transaction is rolled back whole and its items written one by one: the others
    are failed exactly once."""
    client = await api()
    (a, ta), (b, tb), (c, tc) = await _leased(client, 3)
    failures = database_of(client).failures

    results = await asyncio.gather(
        failures.fail(a, ta, "fine", True),
        failures.fail(b, tb, "no NUL in text: \x00", True),
        failures.fail(c, tc, "fine", True),
        return_exceptions=True,
    )

    assert results[0] is JobStatus.RETRYING and results[2] is JobStatus.RETRYING
    assert isinstance(results[1], Exception) and not isinstance(results[1], Conflict | NotFound)
    for job in (a, c):
        row = await job_row(db, str(job))
        assert (row["status"], row["retry_count"]) == ("retrying", 1)
        assert await db.fetchval("SELECT count(*) FROM queueflow.job_attempts WHERE job_id = $1", job) == 1
    assert (await job_row(db, str(b)))["status"] == "running"


@pytest.mark.parametrize("retryable", [True, False])
async def test_concurrent_protocol_failures_are_each_answered_204(api, db, retryable):
    client = await api()
    held = await _leased(client, 30)

    answers = await asyncio.gather(*(fail(client, str(j), str(t), retryable=retryable) for j, t in held))

    assert answers == [(204, None)] * 30
    want = "retrying" if retryable else "failed"
    rows = await db.fetch("SELECT status, count(*) AS n FROM queueflow.jobs GROUP BY status")
    assert [(r["status"], r["n"]) for r in rows] == [(want, 30)]


async def test_concurrent_protocol_heartbeats_each_extend_their_own_lease(api, db):
    client = await api()
    held = await _leased(client, 30)
    jobs = [j for j, _ in held]
    before = await _locks(db, jobs)

    answers = await asyncio.gather(
        *(heartbeat(client, str(j), str(t), extend_secs=3000) for j, t in held),
        heartbeat(client, str(jobs[0]), str(uuid.uuid4()), extend_secs=3000),
    )

    assert answers[:30] == [(200, {"status": "running"})] * 30
    assert answers[30][0] == 409  # a stale token in the same group
    after = await _locks(db, jobs)
    assert all((after[j] - before[j]).total_seconds() >= 2970 for j in jobs)
