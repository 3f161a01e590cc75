"""Small helpers for driving the worker protocol through an in-process test client, and for reading
and forcing job rows with SQL. Shared by tests/protocol, tests/janitor and tests/worker."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import asyncpg
from aiohttp.test_utils import TestClient

from tests.support.waiting import eventually

AUTH = {"Authorization": "Bearer dev"}
TERMINAL = frozenset({"completed", "failed", "cancelled"})


async def create_job(
    client: TestClient,
    task: str = "echo",
    payload: dict[str, Any] | None = None,
    *,
    queue: str | None = None,
    run_at: datetime | None = None,
    headers: dict[str, str] = AUTH,
    **config: Any,
) -> str:
    """POST /api/v1/jobs; `config` holds JobConfigRequest fields (max_retries, timeout, priority...)."""
    body: dict[str, Any] = {"task_name": task, "payload": payload or {}}
    if queue is not None:
        config["queue"] = queue
    if config:
        body["config"] = config
    if run_at is not None:
        body["run_at"] = run_at.isoformat()
    resp = await client.post("/api/v1/jobs", json=body, headers=headers)
    assert resp.status == 201, await resp.text()
    return str((await resp.json())["job_id"])


async def get_job(client: TestClient, job_id: str, headers: dict[str, str] = AUTH) -> dict[str, Any]:
    resp = await client.get(f"/api/v1/jobs/{job_id}", headers=headers)
    assert resp.status == 200, await resp.text()
    return dict(await resp.json())


async def finished(client: TestClient, job_id: str, timeout: float = 10.0) -> dict[str, Any]:
    """Wait until the job is terminal; returns it."""

    async def check() -> dict[str, Any] | None:
        job = await get_job(client, job_id)
        return job if job["status"] in TERMINAL else None

    return await eventually(check, timeout=timeout, message=f"job {job_id} finished")


async def reaches(client: TestClient, job_id: str, status: str) -> dict[str, Any]:
    """Wait until the job has `status`; returns it."""

    async def check() -> dict[str, Any] | None:
        job = await get_job(client, job_id)
        return job if job["status"] == status else None

    return await eventually(check, message=f"job {job_id} is {status}")


async def cancel(client: TestClient, job_id: str) -> int:
    resp = await client.post(f"/api/v1/jobs/{job_id}/cancel", headers=AUTH)
    return resp.status


async def post(client: TestClient, path: str, body: Any, headers: dict[str, str] = AUTH) -> tuple[int, Any]:
    resp = await client.post(path, json=body, headers=headers)
    text = await resp.text()
    return resp.status, (json.loads(text) if text else None)


async def lease(
    client: TestClient, queue: str = "default", headers: dict[str, str] = AUTH, **body: Any
) -> list[dict[str, Any]]:
    """Lease; asserts 200 and returns the `jobs` list ({job, lease_token} items)."""
    status, data = await post(client, f"/api/v1/queues/{queue}/lease", body, headers)
    assert status == 200, data
    assert set(data) == {"jobs"}, data
    return list(data["jobs"])


async def lease_one(client: TestClient, queue: str = "default", **body: Any) -> tuple[dict[str, Any], str]:
    """Lease exactly one job (job, token); asserts one came back."""
    body.setdefault("max_jobs", 1)
    jobs = await lease(client, queue, **body)
    assert len(jobs) == 1, jobs
    return jobs[0]["job"], jobs[0]["lease_token"]


async def heartbeat(client: TestClient, job_id: str, token: str, extend_secs: int = 30) -> tuple[int, Any]:
    return await post(
        client, f"/api/v1/jobs/{job_id}/heartbeat", {"lease_token": token, "extend_secs": extend_secs}
    )


async def complete(
    client: TestClient, job_id: str, token: str, result: dict[str, Any] | None = None
) -> tuple[int, Any]:
    body: dict[str, Any] = {"lease_token": token}
    if result is not None:
        body["result"] = result
    return await post(client, f"/api/v1/jobs/{job_id}/complete", body)


async def fail(
    client: TestClient, job_id: str, token: str, error: str = "boom", retryable: bool | None = None
) -> tuple[int, Any]:
    body: dict[str, Any] = {"lease_token": token, "error": error}
    if retryable is not None:
        body["retryable"] = retryable
    return await post(client, f"/api/v1/jobs/{job_id}/fail", body)


# --- SQL -------------------------------------------------------------------------------------------


async def job_row(db: asyncpg.Connection, job_id: str) -> asyncpg.Record:
    row = await db.fetchrow("SELECT * FROM queueflow.jobs WHERE id = $1::uuid", job_id)
    assert row is not None, f"no job row {job_id}"
    return row


async def dead_letters(db: asyncpg.Connection, job_id: str) -> list[asyncpg.Record]:
    return list(await db.fetch("SELECT * FROM queueflow.dead_letters WHERE job_id = $1::uuid", job_id))


async def expire_lease(db: asyncpg.Connection, job_id: str) -> None:
    """Make a running job's lease look expired, as if its worker had died a while ago."""
    status = await db.execute(
        "UPDATE queueflow.jobs SET locked_until = now() - interval '1 second' "
        "WHERE id = $1::uuid AND status = 'running'",
        job_id,
    )
    assert status == "UPDATE 1", status


async def make_due(db: asyncpg.Connection, job_id: str) -> None:
    """Move a waiting (delayed or retrying) job's scheduled_at into the past."""
    status = await db.execute(
        "UPDATE queueflow.jobs SET scheduled_at = now() - interval '1 second' "
        "WHERE id = $1::uuid AND status IN ('pending', 'retrying')",
        job_id,
    )
    assert status == "UPDATE 1", status


def ts(value: str) -> datetime:
    return datetime.fromisoformat(value)
