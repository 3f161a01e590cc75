"""POST /api/v1/jobs/{id}/fail: a retry with durable backoff while budget remains, otherwise a
terminal failure and its dead letter, written together."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from shared.domain.jobs import JobConfig
from tests.protocol.helpers import (
    cancel,
    create_job,
    dead_letters,
    expire_lease,
    fail,
    get_job,
    job_row,
    lease,
    lease_one,
    make_due,
    post,
    ts,
)
from tests.support.api import janitor_of


async def test_a_retryable_failure_schedules_a_retry_with_backoff_and_releases_the_lease(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=3)  # defaults: exponential, 60 s, jitter 0.1
    _, token = await lease_one(client)
    before = await db.fetchval("SELECT now()")

    status, body = await fail(client, job_id, token, "upstream timed out")

    after = await db.fetchval("SELECT now()")
    assert (status, body) == (204, None)
    job = await get_job(client, job_id)
    assert job["status"] == "retrying"
    assert job["retry_count"] == 1
    assert job["error_message"] == "upstream timed out"
    assert job["next_retry_at"] == job["scheduled_at"]
    assert "completed_at" not in job
    low, high = JobConfig.of({"max_retries": 3}).backoff_bounds(0)
    assert (low, high) == (54, 66)
    scheduled = ts(job["scheduled_at"])
    assert before + timedelta(seconds=low) <= scheduled <= after + timedelta(seconds=high)
    row = await job_row(db, job_id)
    assert row["locked_until"] is None
    assert await dead_letters(db, job_id) == []
    # The retry is durable and invisible until its backoff elapses.
    assert await lease(client, max_jobs=10) == []


async def test_retryable_is_the_default(api):
    client = await api()
    job_id = await create_job(client, max_retries=1)
    _, token = await lease_one(client)
    status, _ = await post(client, f"/api/v1/jobs/{job_id}/fail", {"lease_token": token, "error": "e"})
    assert status == 204
    assert (await get_job(client, job_id))["status"] == "retrying"


async def test_the_second_retry_waits_longer_under_exponential_backoff(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=5, retry_delay_secs=10, jitter_factor=0.0)
    _, token = await lease_one(client)
    t0 = await db.fetchval("SELECT now()")
    assert (await fail(client, job_id, token))[0] == 204
    t1 = await db.fetchval("SELECT now()")
    first = await job_row(db, job_id)
    assert t0 + timedelta(seconds=10) <= first["scheduled_at"] <= t1 + timedelta(seconds=10)
    assert first["next_retry_at"] == first["scheduled_at"]
    await make_due(db, job_id)
    _, token = await lease_one(client)
    t0 = await db.fetchval("SELECT now()")
    assert (await fail(client, job_id, token))[0] == 204
    t1 = await db.fetchval("SELECT now()")
    second = await job_row(db, job_id)
    assert second["retry_count"] == 2
    assert t0 + timedelta(seconds=20) <= second["scheduled_at"] <= t1 + timedelta(seconds=20)


async def test_an_exhausted_budget_fails_the_job_and_dead_letters_it_in_the_same_transaction(api, db):
    client = await api()
    job_id = await create_job(client, queue="imports", task="ingest", max_retries=1, retry_delay_secs=0)
    _, token = await lease_one(client, "imports")
    assert (await fail(client, job_id, token, "first"))[0] == 204
    _, token = await lease_one(client, "imports")

    assert (await fail(client, job_id, token, "second and last"))[0] == 204

    job = await get_job(client, job_id)
    assert job["status"] == "failed"
    assert job["retry_count"] == 1
    assert job["delivery_count"] == 2
    assert job["error_message"] == "second and last"
    [dl] = await dead_letters(db, job_id)
    assert dl["reason"] == "max_attempts_exceeded"
    assert dl["error_message"] == "second and last"
    assert (dl["queue_name"], dl["task_name"], dl["tenant_id"]) == ("imports", "ingest", "tenant1")
    row = await job_row(db, job_id)
    # now() is the transaction's start: equal instants mean one transaction wrote both rows.
    assert dl["created_at"] == row["completed_at"]
    assert row["locked_until"] is None


async def test_max_retries_zero_means_a_single_attempt(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=0)
    _, token = await lease_one(client)
    assert (await fail(client, job_id, token, "only try"))[0] == 204
    assert (await get_job(client, job_id))["status"] == "failed"
    assert [d["reason"] for d in await dead_letters(db, job_id)] == ["max_attempts_exceeded"]


async def test_a_non_retryable_failure_dead_letters_at_once_despite_remaining_budget(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=5)
    _, token = await lease_one(client)

    assert (await fail(client, job_id, token, "invalid input", retryable=False))[0] == 204

    job = await get_job(client, job_id)
    assert job["status"] == "failed"
    assert job["retry_count"] == 0
    assert job["error_message"] == "invalid input"
    assert "next_retry_at" not in job
    [dl] = await dead_letters(db, job_id)
    assert dl["reason"] == "non_retryable"
    assert dl["created_at"] == (await job_row(db, job_id))["completed_at"]
    dlq = await (await client.get("/api/v1/dlq", headers={"Authorization": "Bearer dev"})).json()
    assert [d["job_id"] for d in dlq["dead_letters"]] == [job_id]


async def test_a_replayed_fail_on_a_failed_job_is_204_and_writes_one_dead_letter(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    assert (await fail(client, job_id, token, "bad", retryable=False))[0] == 204
    assert (await fail(client, job_id, token, "bad again", retryable=False))[0] == 204
    assert len(await dead_letters(db, job_id)) == 1
    assert (await get_job(client, job_id))["error_message"] == "bad"


async def test_a_stale_token_after_a_reclaim_cannot_fail_the_job(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=3)
    _, token = await lease_one(client)
    await expire_lease(db, job_id)
    await janitor_of(client).reclaim_expired()
    retry_count = (await job_row(db, job_id))["retry_count"]

    status, body = await fail(client, job_id, token, "late", retryable=False)

    assert status == 409
    assert body["error"].startswith("conflict:")
    row = await job_row(db, job_id)
    assert row["status"] == "retrying"
    assert row["retry_count"] == retry_count
    assert await dead_letters(db, job_id) == []


async def test_a_stale_token_cannot_fail_a_job_another_worker_holds(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=3, retry_delay_secs=0)
    _, old = await lease_one(client)
    assert (await fail(client, job_id, old))[0] == 204
    _, new = await lease_one(client)
    assert (await fail(client, job_id, old, "ghost", retryable=False))[0] == 409
    row = await job_row(db, job_id)
    assert row["status"] == "running"
    assert str(row["lease_token"]) == new


async def test_the_holders_fail_after_a_cancel_is_204_and_writes_nothing(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=0)
    _, token = await lease_one(client)
    assert await cancel(client, job_id) == 204

    assert (await fail(client, job_id, token, "too late"))[0] == 204

    job = await get_job(client, job_id)
    assert job["status"] == "cancelled"
    assert "error_message" not in job
    assert await dead_letters(db, job_id) == []


async def test_a_token_that_never_held_the_job_is_409(api, db):
    client = await api()
    job_id = await create_job(client)
    await lease_one(client)
    assert (await fail(client, job_id, str(uuid.uuid4())))[0] == 409
    assert (await fail(client, job_id, "not-a-uuid"))[0] == 409
    assert (await job_row(db, job_id))["status"] == "running"


@pytest.mark.parametrize("job_id", ["5d6f1c8e-8a53-4c59-9d55-0c3bdb1f0a11", "nope"])
async def test_fail_for_an_unknown_job_is_404(api, job_id):
    client = await api()
    assert (await fail(client, job_id, str(uuid.uuid4())))[0] == 404


@pytest.mark.parametrize(
    "body",
    [
        {"lease_token": "t"},
        {"error": "e"},
        {"lease_token": "t", "error": 5},
        {"lease_token": "t", "error": "e", "retryable": "no"},
    ],
)
async def test_a_malformed_fail_is_400_and_leaves_the_job_running(api, db, body):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    if body.get("lease_token") == "t":
        body = {**body, "lease_token": token}
    assert (await post(client, f"/api/v1/jobs/{job_id}/fail", body))[0] == 400
    assert (await job_row(db, job_id))["status"] == "running"


async def test_a_dead_letter_replay_is_leasable_as_a_fresh_job(api, db):
    client = await api()
    job_id = await create_job(client, queue="q", payload={"p": 1})
    _, token = await lease_one(client, "q")
    assert (await fail(client, job_id, token, retryable=False))[0] == 204
    [dl] = await dead_letters(db, job_id)
    status, body = await post(client, f"/api/v1/dlq/{dl['id']}/replay", None)
    assert status == 201
    job, token2 = await lease_one(client, "q")
    assert job["id"] == body["job_id"] != job_id
    assert job["payload"] == {"p": 1}
    assert (job["delivery_count"], job["retry_count"]) == (1, 0)
    assert token2 != token
