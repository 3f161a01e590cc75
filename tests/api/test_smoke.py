"""The smallest end-to-end path through the in-process app: enqueue, in-process echo, result."""

from tests.support.api import settings_of
from tests.support.waiting import eventually

AUTH = {"Authorization": "Bearer dev"}


async def test_echo_job_completes_with_payload_and_echoed_flag(api):
    client = await api(mode="all")
    resp = await client.post("/api/v1/jobs", json={"task_name": "echo", "payload": {"n": 1}}, headers=AUTH)
    assert resp.status == 201
    job_id = (await resp.json())["job_id"]

    async def finished():
        job = await (await client.get(f"/api/v1/jobs/{job_id}", headers=AUTH)).json()
        return job if job["status"] == "completed" else None

    job = await eventually(finished)
    assert job["result"] == {"n": 1, "echoed": True}
    assert job["delivery_count"] == 1
    assert settings_of(client).mode == "all"
