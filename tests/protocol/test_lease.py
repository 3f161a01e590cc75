"""POST /api/v1/queues/{queue}/lease: what is claimed, in which order, and what a claim does."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from tests.protocol.helpers import (
    complete,
    create_job,
    fail,
    get_job,
    job_row,
    lease,
    lease_one,
    make_due,
    post,
    ts,
)


async def test_empty_body_leases_one_job_with_the_default_thirty_second_lease(api, db):
    client = await api()
    first = await create_job(client, payload={"n": 1})
    await create_job(client, payload={"n": 2})

    status, data = await post(client, "/api/v1/queues/default/lease", {})
    assert status == 200
    assert len(data["jobs"]) == 1
    job_id = data["jobs"][0]["job"]["id"]
    assert job_id == first
    row = await job_row(db, job_id)
    assert row["locked_until"] - row["started_at"] == timedelta(seconds=30)


async def test_a_body_less_request_is_a_400_and_leases_nothing(api):
    """The body is required (API-NOTES section 3, and the OpenAPI document); `{}` is the one whose
    fields all take their defaults."""
    client = await api()
    await create_job(client)
    resp = await client.post("/api/v1/queues/default/lease", headers={"Authorization": "Bearer dev"})
    assert resp.status == 400
    assert (await resp.json())["error"] == "validation error: a JSON body is required"
    resp = await client.post("/api/v1/queues/default/lease", json={}, headers={"Authorization": "Bearer dev"})
    assert len((await resp.json())["jobs"]) == 1


@pytest.mark.parametrize(
    "body",
    [
        {"max_jobs": 0},
        {"max_jobs": 101},
        {"max_jobs": -1},
        {"lease_secs": 0},
        {"lease_secs": 3601},
        {"wait_secs": -1},
        {"wait_secs": 31},
        {"max_jobs": "3"},
        {"unknown_field": 1},
    ],
)
async def test_out_of_range_or_malformed_lease_parameters_are_rejected_with_400(api, body):
    client = await api()
    await create_job(client)
    status, data = await post(client, "/api/v1/queues/default/lease", body)
    assert status == 400, data
    assert data["error"].startswith("validation error")
    assert "timestamp" in data


@pytest.mark.parametrize("queue", ["%20", "%20%20", "q" * 129])
async def test_a_queue_name_no_job_can_have_is_400(api, queue):
    client = await api()
    status, data = await post(client, f"/api/v1/queues/{queue}/lease", {"wait_secs": 0})
    assert status == 400, data
    assert data["error"].startswith(
        "validation error: queue name must be 1 to 128 bytes with no whitespace or control characters"
    )


async def test_malformed_json_body_is_400(api):
    client = await api()
    resp = await client.post(
        "/api/v1/queues/default/lease",
        data=b"{not json",
        headers={"Authorization": "Bearer dev", "Content-Type": "application/json"},
    )
    assert resp.status == 400


@pytest.mark.parametrize(
    "body",
    [
        {"max_jobs": 1, "lease_secs": 1, "wait_secs": 0},
        {"max_jobs": 100, "lease_secs": 3600, "wait_secs": 0},
    ],
)
async def test_boundary_lease_parameters_are_accepted(api, db, body):
    client = await api()
    job_id = await create_job(client)
    jobs = await lease(client, **body)
    assert [j["job"]["id"] for j in jobs] == [job_id]
    row = await job_row(db, job_id)
    assert row["locked_until"] - row["started_at"] == timedelta(seconds=body["lease_secs"])


async def test_claim_marks_running_with_new_token_delivery_count_and_lease_deadline(api, db):
    client = await api()
    job_id = await create_job(client, payload={"x": 1})

    job, token = await lease_one(client, lease_secs=7)

    assert job["id"] == job_id
    assert job["status"] == "running"
    assert job["payload"] == {"x": 1}
    assert job["delivery_count"] == 1
    assert job["retry_count"] == 0
    assert job["started_at"] is not None
    assert uuid.UUID(token).version == 4  # random, not sequential
    row = await job_row(db, job_id)
    assert str(row["lease_token"]) == token
    assert row["status"] == "running"
    assert row["locked_until"] - row["started_at"] == timedelta(seconds=7)
    assert (await get_job(client, job_id))["status"] == "running"


async def test_a_leased_job_is_not_handed_out_again_while_its_lease_is_held(api):
    client = await api()
    await create_job(client)
    await lease_one(client)
    assert await lease(client) == []


async def test_jobs_are_leased_by_priority_then_scheduled_at_then_created_at(api, db):
    client = await api()
    past = await db.fetchval("SELECT now()") - timedelta(hours=1)
    late_low = await create_job(client, payload={"n": "late_low"})
    high = await create_job(client, payload={"n": "high"}, priority=5)
    early_low_1 = await create_job(client, payload={"n": "early_low_1"}, run_at=past)
    early_low_2 = await create_job(client, payload={"n": "early_low_2"}, run_at=past)
    negative = await create_job(
        client, payload={"n": "negative"}, priority=-3, run_at=past - timedelta(hours=1)
    )
    expected = [high, early_low_1, early_low_2, late_low, negative]

    # One claim of many: the response is in claim order.
    jobs = await lease(client, max_jobs=10)
    assert [j["job"]["id"] for j in jobs] == expected


async def test_one_at_a_time_claims_follow_the_same_order(api, db):
    client = await api()
    past = await db.fetchval("SELECT now()") - timedelta(minutes=5)
    late_low = await create_job(client)
    high = await create_job(client, priority=2)
    early_low = await create_job(client, run_at=past)
    order = [(await lease_one(client))[0]["id"] for _ in range(3)]
    assert order == [high, early_low, late_low]


async def test_max_jobs_bounds_the_batch_and_the_rest_stay_claimable(api):
    client = await api()
    ids = [await create_job(client, payload={"i": i}) for i in range(5)]
    first = await lease(client, max_jobs=3)
    assert [j["job"]["id"] for j in first] == ids[:3]
    assert len({j["lease_token"] for j in first}) == 3
    rest = await lease(client, max_jobs=100)
    assert [j["job"]["id"] for j in rest] == ids[3:]


async def test_only_the_named_queue_is_leased(api):
    client = await api()
    mine = await create_job(client, queue="images")
    other = await create_job(client, queue="emails")
    assert [j["job"]["id"] for j in await lease(client, "images", max_jobs=10)] == [mine]
    assert [j["job"]["id"] for j in await lease(client, "emails", max_jobs=10)] == [other]
    assert await lease(client, "nobody-enqueues-here", max_jobs=10) == []


async def test_a_job_scheduled_in_the_future_is_invisible_until_due(api, db):
    client = await api()
    future = await db.fetchval("SELECT now()") + timedelta(hours=1)
    job_id = await create_job(client, run_at=future)
    job = await get_job(client, job_id)
    assert ts(job["scheduled_at"]) == future
    assert await lease(client, max_jobs=10) == []

    await make_due(db, job_id)
    job, _ = await lease_one(client)
    assert job["id"] == job_id


async def test_terminal_and_cancelled_jobs_are_never_leased(api, db):
    client = await api()
    done = await create_job(client)
    _, token = await lease_one(client)
    assert (await complete(client, done, token))[0] == 204
    dead = await create_job(client)
    _, token = await lease_one(client)
    assert (await fail(client, dead, token, retryable=False))[0] == 204
    cancelled = await create_job(client)
    resp = await client.post(f"/api/v1/jobs/{cancelled}/cancel", headers={"Authorization": "Bearer dev"})
    assert resp.status == 204
    # Even with every timestamp in the past.
    await db.execute(
        "UPDATE queueflow.jobs SET scheduled_at = now() - interval '1 day', "
        "locked_until = now() - interval '1 day'"
    )
    assert await lease(client, max_jobs=100) == []


async def test_each_claim_gets_a_fresh_token_and_a_redelivery_keeps_started_at(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=3)
    first, token1 = await lease_one(client)
    assert (await fail(client, job_id, token1, "transient"))[0] == 204
    await make_due(db, job_id)

    second, token2 = await lease_one(client)

    assert second["id"] == job_id
    assert token2 != token1
    assert second["delivery_count"] == 2
    assert second["retry_count"] == 1
    assert second["started_at"] == first["started_at"]
    assert "next_retry_at" not in second  # cleared on the claim (absent fields are omitted)


async def test_concurrent_claimers_never_receive_the_same_job(api):
    client = await api()
    resp = await client.post(
        "/api/v1/jobs/batch",
        headers={"Authorization": "Bearer dev"},
        json={"jobs": [{"task_name": "echo", "payload": {"i": i}} for i in range(120)]},
    )
    assert resp.status == 201
    created = set((await resp.json())["job_ids"])

    batches = await asyncio.gather(*(lease(client, max_jobs=7) for _ in range(30)))

    leased = [j["job"]["id"] for batch in batches for j in batch]
    assert len(leased) == len(set(leased)), "a job was handed to two claimers"
    assert set(leased) == created
    tokens = [j["lease_token"] for batch in batches for j in batch]
    assert len(set(tokens)) == len(tokens)


async def test_lease_crosses_tenants_and_needs_the_worker_token(api):
    client = await api(dev=False, worker_token="w-secret", api_keys="k-acme:acme,k-globex:globex")
    acme = await create_job(client, headers={"Authorization": "Bearer k-acme"})
    globex = await create_job(client, headers={"Authorization": "Bearer k-globex"})

    worker = {"Authorization": "Bearer w-secret"}
    jobs = await lease(client, headers=worker, max_jobs=10)
    assert {j["job"]["id"] for j in jobs} == {acme, globex}
    assert {j["job"]["tenant_id"] for j in jobs} == {"acme", "globex"}

    status, _ = await post(client, "/api/v1/queues/default/lease", {}, {"Authorization": "Bearer k-acme"})
    assert status == 403
    status, _ = await post(client, "/api/v1/queues/default/lease", {}, {})
    assert status == 401
