"""POST /api/v1/jobs/{id}/complete: the holder records success once; replays are harmless; a lost
lease is a 409 and never overwrites anything."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from shared import metrics
from tests.protocol.helpers import (
    cancel,
    complete,
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
)
from tests.support.api import janitor_of


def completed_counter() -> float:
    return metrics.REGISTRY.get_sample_value("queueflow_jobs_completed_total") or 0.0


async def test_the_holder_completes_with_204_and_the_result_is_stored(api, db):
    client = await api()
    job_id = await create_job(client, payload={"image": "a.png"})
    _, token = await lease_one(client)

    status, body = await complete(client, job_id, token, {"ok": True, "size": [1, 2]})

    assert (status, body) == (204, None)
    job = await get_job(client, job_id)
    assert job["status"] == "completed"
    assert job["result"] == {"ok": True, "size": [1, 2]}
    assert job["completed_at"] is not None
    row = await job_row(db, job_id)
    assert row["locked_until"] is None
    assert await dead_letters(db, job_id) == []


async def test_result_defaults_to_an_empty_object(api):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    assert (await complete(client, job_id, token))[0] == 204
    assert (await get_job(client, job_id))["result"] == {}


async def test_a_completed_job_is_never_leased_again_even_after_a_janitor_sweep(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client, lease_secs=1)
    assert (await complete(client, job_id, token))[0] == 204
    await db.execute("UPDATE queueflow.jobs SET scheduled_at = now() - interval '1 day'")
    assert await janitor_of(client).reclaim_expired() == 0
    assert await lease(client, max_jobs=10) == []
    assert (await get_job(client, job_id))["status"] == "completed"


async def test_a_replayed_complete_by_the_same_holder_is_204_and_changes_nothing(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    before = completed_counter()
    assert (await complete(client, job_id, token, {"v": 1}))[0] == 204
    first = await job_row(db, job_id)

    status, _ = await complete(client, job_id, token, {"v": 2})

    assert status == 204
    second = await job_row(db, job_id)
    assert second["status"] == "completed"
    assert second["completed_at"] == first["completed_at"]
    assert (await get_job(client, job_id))["result"] == {"v": 1}
    assert completed_counter() - before == 1
    stats = await (await client.get("/api/v1/stats", headers={"Authorization": "Bearer dev"})).json()
    assert stats["jobs_completed"] == 1


async def test_concurrent_duplicate_completes_are_all_204_and_counted_once(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    before = completed_counter()

    results = await asyncio.gather(*(complete(client, job_id, token, {"n": n}) for n in range(8)))

    assert [status for status, _ in results] == [204] * 8
    assert completed_counter() - before == 1
    job = await get_job(client, job_id)
    assert job["status"] == "completed"
    assert job["result"] in [{"n": n} for n in range(8)]


async def test_a_stale_token_after_a_reclaim_is_409_and_records_nothing(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=3)
    _, token = await lease_one(client)
    await expire_lease(db, job_id)
    assert await janitor_of(client).reclaim_expired() == 1

    status, body = await complete(client, job_id, token, {"late": True})

    assert status == 409
    assert body["error"].startswith("conflict: lease is no longer held")
    job = await get_job(client, job_id)
    assert job["status"] == "retrying"
    assert "result" not in job


async def test_a_stale_token_cannot_complete_a_job_another_worker_now_holds(api, db):
    client = await api()
    job_id = await create_job(client, max_retries=3)
    _, old = await lease_one(client)
    await expire_lease(db, job_id)
    await janitor_of(client).reclaim_expired()
    await make_due(db, job_id)
    _, new = await lease_one(client)

    assert (await complete(client, job_id, old, {"who": "old"}))[0] == 409
    assert (await job_row(db, job_id))["status"] == "running"
    assert (await complete(client, job_id, new, {"who": "new"}))[0] == 204
    job = await get_job(client, job_id)
    assert job["result"] == {"who": "new"}
    assert job["delivery_count"] == 2


async def test_a_stale_token_replaying_against_a_job_finished_by_another_holder_is_409(api, db):
    """Upstream accepted any token once the job was terminal; only the finishing holder may replay."""
    client = await api()
    job_id = await create_job(client, max_retries=3)
    _, old = await lease_one(client)
    await expire_lease(db, job_id)
    await janitor_of(client).reclaim_expired()
    await make_due(db, job_id)
    _, new = await lease_one(client)
    assert (await complete(client, job_id, new, {"who": "new"}))[0] == 204

    assert (await complete(client, job_id, old, {"who": "old"}))[0] == 409
    assert (await complete(client, job_id, str(uuid.uuid4())))[0] == 409
    assert (await get_job(client, job_id))["result"] == {"who": "new"}


async def test_the_holders_complete_after_a_cancel_is_204_and_the_job_stays_cancelled(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    assert await cancel(client, job_id) == 204
    before = completed_counter()

    assert (await complete(client, job_id, token, {"too": "late"}))[0] == 204

    job = await get_job(client, job_id)
    assert job["status"] == "cancelled"
    assert "result" not in job
    assert completed_counter() == before
    assert await dead_letters(db, job_id) == []


async def test_a_token_that_never_held_the_running_job_is_409(api, db):
    client = await api()
    job_id = await create_job(client)
    await lease_one(client)
    assert (await complete(client, job_id, str(uuid.uuid4())))[0] == 409
    assert (await complete(client, job_id, "garbage"))[0] == 409
    assert (await job_row(db, job_id))["status"] == "running"


async def test_a_pending_job_cannot_be_completed_without_a_lease(api):
    client = await api()
    job_id = await create_job(client)
    assert (await complete(client, job_id, str(uuid.uuid4())))[0] == 409
    assert (await get_job(client, job_id))["status"] == "pending"


@pytest.mark.parametrize("job_id", ["5d6f1c8e-8a53-4c59-9d55-0c3bdb1f0a11", "nope"])
async def test_complete_for_an_unknown_job_is_404(api, job_id):
    client = await api()
    assert (await complete(client, job_id, str(uuid.uuid4())))[0] == 404


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"result": {}},
        {"lease_token": "t", "result": [1]},
        {"lease_token": "t", "result": "done"},
        {"lease_token": "t", "extra": 1},
    ],
)
async def test_a_malformed_complete_is_400_and_leaves_the_job_running(api, db, body):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    if body.get("lease_token") == "t":
        body = {**body, "lease_token": token}
    status, _ = await post(client, f"/api/v1/jobs/{job_id}/complete", body)
    assert status == 400
    assert (await job_row(db, job_id))["status"] == "running"


async def test_a_batch_is_completed_job_by_job_by_each_token(api):
    client = await api()
    ids = [await create_job(client, payload={"i": i}) for i in range(4)]
    leased = await lease(client, max_jobs=4)
    tokens = {j["job"]["id"]: j["lease_token"] for j in leased}
    assert set(tokens) == set(ids)
    # Tokens are per job: one job's token cannot complete another.
    assert (await complete(client, ids[0], tokens[ids[1]]))[0] == 409
    for job_id in ids:
        assert (await complete(client, job_id, tokens[job_id], {"i": job_id}))[0] == 204
    for job_id in ids:
        assert (await get_job(client, job_id))["result"] == {"i": job_id}


async def test_failing_after_completing_is_an_idempotent_no_op(api, db):
    client = await api()
    job_id = await create_job(client)
    _, token = await lease_one(client)
    assert (await complete(client, job_id, token, {"ok": 1}))[0] == 204
    assert (await fail(client, job_id, token, "late failure"))[0] == 204
    job = await get_job(client, job_id)
    assert job["status"] == "completed"
    assert "error_message" not in job
    assert await dead_letters(db, job_id) == []
