"""The janitor reclaims expired leases through the retry policy: a crash consumes retry budget, the
old holder's token goes stale, and a job that keeps crashing ends in the dead-letter queue."""

from __future__ import annotations

from datetime import timedelta

import structlog

from shared.domain.jobs import JobConfig
from tests.protocol.helpers import (
    complete,
    create_job,
    dead_letters,
    expire_lease,
    fail,
    get_job,
    heartbeat,
    job_row,
    lease,
    lease_one,
    make_due,
    ts,
)
from tests.support.api import janitor_of
from tests.support.waiting import eventually

LEASE_EXPIRED = "lease expired"


async def status_of(db, job_id: str) -> str:
    return str((await job_row(db, job_id))["status"])


async def is_status(db, job_id: str, status: str) -> bool:
    return await status_of(db, job_id) == status


async def test_an_expired_lease_is_reclaimed_into_a_retry_that_consumes_budget(api, db):
    client = await api()
    await api(mode="janitor", janitor_interval_secs=0.1)
    job_id = await create_job(client, max_retries=3)
    _, token = await lease_one(client)
    await expire_lease(db, job_id)
    before = await db.fetchval("SELECT now()")

    await eventually(lambda: is_status(db, job_id, "retrying"))

    after = await db.fetchval("SELECT now()")
    job = await get_job(client, job_id)
    assert job["retry_count"] == 1
    assert job["delivery_count"] == 1
    assert LEASE_EXPIRED in job["error_message"]
    low, high = JobConfig.of({"max_retries": 3}).backoff_bounds(0)
    assert before + timedelta(seconds=low) <= ts(job["scheduled_at"]) <= after + timedelta(seconds=high)
    row = await job_row(db, job_id)
    assert row["lease_token"] is None
    assert row["locked_until"] is None
    assert await dead_letters(db, job_id) == []
    # The presumed-dead worker comes back: every lease-guarded call is refused.
    assert (await heartbeat(client, job_id, token))[0] == 409
    assert (await complete(client, job_id, token, {"late": True}))[0] == 409
    assert (await fail(client, job_id, token, "late"))[0] == 409
    assert (await job_row(db, job_id))["retry_count"] == 1


async def test_a_second_crash_with_max_retries_one_dead_letters_the_job(api, db):
    client = await api()
    await api(mode="janitor", janitor_interval_secs=0.1)
    job_id = await create_job(client, max_retries=1)
    _, first = await lease_one(client)
    await expire_lease(db, job_id)
    await eventually(lambda: is_status(db, job_id, "retrying"))
    await make_due(db, job_id)
    _, second = await lease_one(client)
    assert second != first
    await expire_lease(db, job_id)

    await eventually(lambda: is_status(db, job_id, "failed"))

    job = await get_job(client, job_id)
    assert (job["retry_count"], job["delivery_count"]) == (1, 2)
    assert LEASE_EXPIRED in job["error_message"]
    [dl] = await dead_letters(db, job_id)
    assert dl["reason"] == "max_attempts_exceeded"
    assert LEASE_EXPIRED in dl["error_message"]
    assert dl["created_at"] == (await job_row(db, job_id))["completed_at"]
    assert (await complete(client, job_id, second))[0] == 409
    assert await lease(client, max_jobs=10) == []


async def test_a_crash_with_no_retry_budget_dead_letters_on_the_first_reclaim(api, db):
    client = await api()
    await api(mode="janitor", janitor_interval_secs=0.1)
    job_id = await create_job(client, max_retries=0)
    await lease_one(client)
    await expire_lease(db, job_id)
    await eventually(lambda: is_status(db, job_id, "failed"))
    assert [d["reason"] for d in await dead_letters(db, job_id)] == ["max_attempts_exceeded"]


async def test_the_redelivered_job_gets_a_fresh_token_and_can_be_completed(api, db):
    client = await api()
    await api(mode="janitor", janitor_interval_secs=0.1)
    job_id = await create_job(client, max_retries=2, retry_delay_secs=0)
    _, old = await lease_one(client)
    await expire_lease(db, job_id)
    await eventually(lambda: is_status(db, job_id, "retrying"))

    job, new = await lease_one(client, wait_secs=5)

    assert job["id"] == job_id and new != old
    assert (job["delivery_count"], job["retry_count"]) == (2, 1)
    assert await heartbeat(client, job_id, new) == (200, {"status": "running"})
    assert (await complete(client, job_id, new, {"done": 1}))[0] == 204
    assert (await complete(client, job_id, old, {"done": 0}))[0] == 409
    final = await get_job(client, job_id)
    assert final["status"] == "completed" and final["result"] == {"done": 1}


async def test_live_leases_and_finished_jobs_are_left_alone(api, db):
    client = await api()
    janitor = janitor_of(client)
    live = await create_job(client)
    _, live_token = await lease_one(client, lease_secs=3600)
    done = await create_job(client)
    _, done_token = await lease_one(client, lease_secs=1)
    assert (await complete(client, done, done_token))[0] == 204
    cancelled = await create_job(client)
    await lease_one(client)
    assert (
        await client.post(f"/api/v1/jobs/{cancelled}/cancel", headers={"Authorization": "Bearer dev"})
    ).status == 204
    await db.execute(
        "UPDATE queueflow.jobs SET locked_until = now() - interval '1 hour' WHERE id <> $1::uuid", live
    )

    assert await janitor.reclaim_expired() == 0

    row = await job_row(db, live)
    assert row["status"] == "running" and str(row["lease_token"]) == live_token
    assert await status_of(db, done) == "completed"
    assert await status_of(db, cancelled) == "cancelled"


async def test_more_expired_leases_than_one_batch_are_all_reclaimed(api, db):
    client = await api()
    await api(mode="janitor", janitor_interval_secs=0.1, janitor_batch=4)
    resp = await client.post(
        "/api/v1/jobs/batch",
        headers={"Authorization": "Bearer dev"},
        json={"jobs": [{"task_name": "echo"}] * 37},
    )
    assert resp.status == 201
    assert len(await lease(client, max_jobs=37)) == 37
    await db.execute("UPDATE queueflow.jobs SET locked_until = now() - interval '1 second'")

    async def all_retrying() -> bool:
        rows = await db.fetch("SELECT status, retry_count FROM queueflow.jobs")
        return all((r["status"], r["retry_count"]) == ("retrying", 1) for r in rows)

    await eventually(all_retrying)


async def test_a_failing_sweep_does_not_stop_lease_recovery(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=3)
    await lease_one(client)
    # Break the retry policy's SQL so every reclaim fails, then start the janitor.
    await db.execute(
        "ALTER FUNCTION queueflow.retry_delay_secs(jsonb, integer) RENAME TO retry_delay_secs_off"
    )
    await expire_lease(db, job_id)
    with structlog.testing.capture_logs() as logs:
        await api(mode="janitor", janitor_interval_secs=0.1)
        await eventually(lambda: any(e["event"] == "janitor_sweep_failed" for e in logs))
    assert await status_of(db, job_id) == "running"

    await db.execute(
        "ALTER FUNCTION queueflow.retry_delay_secs_off(jsonb, integer) RENAME TO retry_delay_secs"
    )

    await eventually(lambda: is_status(db, job_id, "retrying"))
