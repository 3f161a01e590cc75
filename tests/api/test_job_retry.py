"""Retrying jobs in place: POST /api/v1/jobs/{id}/retry runs a failed or cancelled job again with the
same id, status pending and its retry budget reset; its dead letter is marked replayed by it, so
the DLQ cannot run it a second time. POST /api/v1/jobs/retry does the same by filter."""

from __future__ import annotations

from tests.api.helpers import (
    ACME,
    GLOBEX,
    STRICT,
    WORKER,
    create_job,
    expect_error,
    fail_job,
    get_job,
    lease_one,
)


async def _failed(client, queue: str = "q", headers=ACME) -> str:
    job_id = await create_job(client, headers, task_name="t", config={"queue": queue, "max_retries": 0})
    token = await lease_one(client, queue, job_id, WORKER)
    await fail_job(client, job_id, token, headers=WORKER)
    assert (await get_job(client, job_id, headers))["status"] == "failed"
    return job_id


async def test_a_failed_job_runs_again_in_place_and_its_dead_letter_cannot_replay_it(api):
    client = await api(**STRICT)
    job_id = await _failed(client)
    resp = await client.post(f"/api/v1/jobs/{job_id}/retry", headers=ACME)
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert (body["id"], body["status"], body["retry_count"]) == (job_id, "pending", 0)
    assert "error_message" not in body and "completed_at" not in body
    # It is claimable again, and runs under the same id.
    token = await lease_one(client, "q", job_id, WORKER)
    assert token
    [dead] = (await (await client.get("/api/v1/dlq", headers=ACME)).json())["dead_letters"]
    assert dead["job_id"] == job_id and dead["replay_job_id"] == job_id and "replayed_at" in dead
    await expect_error(await client.post(f"/api/v1/dlq/{dead['id']}/replay", headers=ACME), 409)


async def test_a_cancelled_job_runs_again(api):
    client = await api(**STRICT)
    job_id = await create_job(client, ACME, task_name="t")
    assert (await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=ACME)).status == 204
    resp = await client.post(f"/api/v1/jobs/{job_id}/retry", headers=ACME)
    assert resp.status == 200 and (await resp.json())["status"] == "pending"


async def test_retrying_a_job_that_is_not_failed_or_cancelled_is_409(api):
    client = await api(**STRICT)
    job_id = await create_job(client, ACME, task_name="t")
    message = await expect_error(await client.post(f"/api/v1/jobs/{job_id}/retry", headers=ACME), 409)
    assert message == "conflict: job is pending; only a failed or cancelled job can be retried"


async def test_a_workflows_job_is_409_naming_the_workflow_retry_route(api):
    client = await api(**STRICT)
    resp = await client.post(
        "/api/v1/workflows", json={"name": "w", "steps": [{"name": "a", "task_name": "t"}]}, headers=ACME
    )
    wf_id = (await resp.json())["workflow_id"]
    [state] = (await (await client.get(f"/api/v1/workflows/{wf_id}/steps", headers=ACME)).json())["steps"]
    assert (await client.post(f"/api/v1/jobs/{state['job_id']}/cancel", headers=ACME)).status == 204
    message = await expect_error(
        await client.post(f"/api/v1/jobs/{state['job_id']}/retry", headers=ACME), 409
    )
    assert f"POST /api/v1/workflows/{wf_id}/retry" in message


async def test_another_tenants_job_and_an_unknown_one_are_404(api):
    client = await api(**STRICT)
    job_id = await _failed(client)
    await expect_error(await client.post(f"/api/v1/jobs/{job_id}/retry", headers=GLOBEX), 404)
    await expect_error(await client.post("/api/v1/jobs/not-a-uuid/retry", headers=ACME), 404)
    assert (await get_job(client, job_id, ACME))["status"] == "failed"


async def test_retry_by_filter_runs_only_the_matching_failed_and_cancelled_jobs(api):
    client = await api(**STRICT)
    emails = [await _failed(client, "emails") for _ in range(3)]
    other_queue = await _failed(client, "imports")
    other_tenant = await _failed(client, "emails", headers=GLOBEX)
    pending = await create_job(client, ACME, task_name="t", config={"queue": "emails"})
    resp = await client.post("/api/v1/jobs/retry", json={"queue": "emails"}, headers=ACME)
    assert resp.status == 200 and await resp.json() == {"retried": 3}
    for job_id in emails:
        assert (await get_job(client, job_id, ACME))["status"] == "pending"
    assert (await get_job(client, other_queue, ACME))["status"] == "failed"
    assert (await get_job(client, other_tenant, GLOBEX))["status"] == "failed"
    assert (await get_job(client, pending, ACME))["status"] == "pending"


async def test_retry_by_filter_honours_status_and_limit_and_refuses_bad_bodies(api):
    client = await api(**STRICT)
    for _ in range(3):
        await _failed(client)
    resp = await client.post("/api/v1/jobs/retry", json={"status": "failed", "limit": 2}, headers=ACME)
    assert await resp.json() == {"retried": 2}
    await expect_error(await client.post("/api/v1/jobs/retry", json={"status": "pending"}, headers=ACME), 400)
    await expect_error(await client.post("/api/v1/jobs/retry", json={"limit": 0}, headers=ACME), 400)
    await expect_error(await client.post("/api/v1/jobs/retry", json={"limit": 100_000}, headers=ACME), 400)


async def test_a_read_only_credential_cannot_retry(api):
    client = await api(**STRICT)
    job_id = await _failed(client)
    await expect_error(
        await client.post(f"/api/v1/jobs/{job_id}/retry", headers={"Authorization": "Bearer ro1"}), 403
    )
    await expect_error(
        await client.post("/api/v1/jobs/retry", json={}, headers={"Authorization": "Bearer ro1"}), 403
    )
