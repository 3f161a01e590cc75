"""A queue's retention of completed jobs through the API (docs/operations.md, "Retention"):
GET/PATCH /api/v1/queues/{queue}, the fleet's defaults (--queue-retention), and what clients of
the job routes see on a queue that removes completed jobs."""

from __future__ import annotations

from typing import Any

from tests.api.helpers import (
    ACME,
    ACME_RO,
    DEV,
    GLOBEX,
    STRICT,
    WORKER,
    complete_job,
    create_batch,
    create_job,
    expect_error,
    fail_job,
    get_job,
    lease_one,
)
from tests.api.test_sse import _open
from tests.support.api import database_of, janitor_of

REMOVE = {"retention": "remove_completed"}


async def patch(client: Any, queue: str, body: Any, headers: dict[str, str] = DEV) -> dict[str, Any]:
    resp = await client.patch(f"/api/v1/queues/{queue}", json=body, headers=headers)
    assert resp.status == 200, await resp.text()
    return dict(await resp.json())


async def queue_of(client: Any, queue: str, headers: dict[str, str] = DEV) -> dict[str, Any]:
    resp = await client.get(f"/api/v1/queues/{queue}", headers=headers)
    assert resp.status == 200, await resp.text()
    return dict(await resp.json())


async def status_of(client: Any, job_id: str) -> int:
    return (await client.get(f"/api/v1/jobs/{job_id}", headers=DEV)).status


async def test_a_queue_never_used_answers_its_defaults_without_being_made(api):
    client = await api()
    assert await queue_of(client, "fresh") == {
        "queue": "fresh",
        "pending": 0,
        "scheduled": 0,
        "running": 0,
        "paused": False,
        "retention": "keep",
    }
    listed = await (await client.get("/api/v1/queues", headers=DEV)).json()
    assert listed == {"queues": []}


async def test_setting_retention_is_the_callers_own_and_the_list_names_it_only_where_it_removes(api):
    client = await api(**STRICT)
    await create_job(client, ACME, config={"queue": "kept"})
    answer = await patch(client, "fast", REMOVE, ACME)
    assert answer == {
        "queue": "fast",
        "pending": 0,
        "scheduled": 0,
        "running": 0,
        "paused": False,
        "retention": "remove_completed",
    }
    assert (await queue_of(client, "fast", ACME))["retention"] == "remove_completed"
    assert (await queue_of(client, "fast", GLOBEX))["retention"] == "keep"
    listed = (await (await client.get("/api/v1/queues", headers=ACME)).json())["queues"]
    assert [(q["queue"], q.get("retention")) for q in listed] == [
        ("fast", "remove_completed"),
        ("kept", None),
    ]
    assert "retention" not in listed[1]  # upstream's shape where nothing is set
    assert (await patch(client, "fast", {"retention": "keep"}, ACME))["retention"] == "keep"
    assert (await patch(client, "fast", {}, ACME))["retention"] == "keep"  # nothing named: nothing changes


async def test_changing_retention_takes_a_write_credential_and_a_known_value(api):
    client = await api(**STRICT)
    await expect_error(await client.patch("/api/v1/queues/fast", json=REMOVE, headers=ACME_RO), 403)
    assert (await queue_of(client, "fast", ACME_RO))["retention"] == "keep"  # reading is fine
    await expect_error(
        await client.patch("/api/v1/queues/fast", json={"retention": "forever"}, headers=ACME), 400
    )
    await expect_error(await client.patch("/api/v1/queues/fast", json={"paused": True}, headers=ACME), 400)
    await expect_error(await client.patch("/api/v1/queues/fast", data=b"[1]", headers=ACME), 400)
    await expect_error(await client.patch("/api/v1/queues/bad%20name", json=REMOVE, headers=ACME), 400)
    await expect_error(await client.patch("/api/v1/queues/fast", json=REMOVE, headers=WORKER), 403)


async def test_the_fleet_default_applies_to_every_tenant_that_chose_nothing(api):
    client = await api(**STRICT, queue_retention=("fast=remove_completed", "slow=keep"))
    assert (await queue_of(client, "fast", ACME))["retention"] == "remove_completed"
    assert (await queue_of(client, "fast", GLOBEX))["retention"] == "remove_completed"
    assert (await queue_of(client, "slow", ACME))["retention"] == "keep"
    await patch(client, "fast", {"retention": "keep"}, GLOBEX)
    assert (await queue_of(client, "fast", GLOBEX))["retention"] == "keep"
    assert (await queue_of(client, "fast", ACME))["retention"] == "remove_completed"


async def test_a_removed_job_answers_404_everywhere_once_its_completion_is_answered(api):
    client = await api()
    await patch(client, "fast", REMOVE)
    [job_id] = await create_batch(client, [{"task_name": "t", "config": {"queue": "fast"}}])
    token = await lease_one(client, "fast", job_id)
    await complete_job(client, job_id, token, {"ok": True})
    assert await status_of(client, job_id) == 404
    for path in ("events", "logs", "attempts"):
        await expect_error(await client.get(f"/api/v1/jobs/{job_id}/{path}", headers=DEV), 404)
    # The worker's own retry of the completion (its answer lost) finds no job: a final answer.
    replay = await client.post(f"/api/v1/jobs/{job_id}/complete", json={"lease_token": token}, headers=DEV)
    await expect_error(replay, 404)


async def test_a_job_created_alone_stays_readable_for_the_grace_after_it_completes(api):
    client = await api()
    await patch(client, "fast", REMOVE)
    job_id = await create_job(client, config={"queue": "fast"})
    await complete_job(client, job_id, await lease_one(client, "fast", job_id), {"ok": True})
    job = await get_job(client, job_id)
    assert (job["status"], job["result"]) == ("completed", {"ok": True})
    janitor = janitor_of(client)
    assert await janitor.remove_lingering() == 0  # its grace (60 s) has not passed
    await database_of(client).pool.execute(
        "UPDATE queueflow.job_removals SET completed_at = now() - interval '61 seconds'"
    )
    assert await janitor.remove_lingering() == 1
    assert await status_of(client, job_id) == 404


async def test_a_batch_job_polled_while_it_runs_keeps_its_outcome_for_the_poller(api):
    client = await api()
    await patch(client, "fast", REMOVE)
    polled, unpolled = await create_batch(client, [{"task_name": "t", "config": {"queue": "fast"}}] * 2)
    resp = await client.post("/api/v1/queues/fast/lease", json={"max_jobs": 2}, headers=DEV)
    tokens = {item["job"]["id"]: item["lease_token"] for item in (await resp.json())["jobs"]}
    assert (await get_job(client, polled))["status"] == "running"
    for job_id, token in tokens.items():
        await complete_job(client, job_id, token, {"id": job_id})
    assert (await get_job(client, polled))["result"] == {"id": polled}
    assert await status_of(client, unpolled) == 404


async def test_a_stream_watching_a_job_of_a_removing_queue_sees_it_complete(api):
    client = await api()
    await patch(client, "fast", REMOVE)
    [job_id] = await create_batch(client, [{"task_name": "t", "config": {"queue": "fast"}}])
    stream = await _open(client, job_id)
    assert (await stream.next())[1]["status"] == "pending"
    token = await lease_one(client, "fast", job_id)
    await complete_job(client, job_id, token, {"streamed": True})
    events = [data for name, data in await stream.rest() if name == "status"]
    assert [e["status"] for e in events][-1] == "completed"
    assert events[-1]["result"] == {"streamed": True}


async def test_failed_and_cancelled_jobs_of_a_removing_queue_stay_and_their_dead_letters_replay(api):
    client = await api()
    await patch(client, "fast", REMOVE)
    failed, cancelled = await create_batch(client, [{"task_name": "t", "config": {"queue": "fast"}}] * 2)
    await client.post(f"/api/v1/jobs/{cancelled}/cancel", headers=DEV)
    await fail_job(client, failed, await lease_one(client, "fast", failed))
    assert (await get_job(client, failed))["status"] == "failed"
    assert (await get_job(client, cancelled))["status"] == "cancelled"
    [entry] = (await (await client.get("/api/v1/dlq", headers=DEV)).json())["dead_letters"]
    assert entry["job_id"] == failed
    resp = await client.post(f"/api/v1/dlq/{entry['id']}/replay", headers=DEV)
    assert resp.status == 201, await resp.text()
    fresh = (await resp.json())["job_id"]
    await complete_job(client, fresh, await lease_one(client, "fast", fresh))
    assert await status_of(client, fresh) == 404  # the copy completed, and went
    assert (await get_job(client, failed))["status"] == "failed"  # the original stays by its dead letter
