"""Raw HTTP helpers for the console tests: set data up through the API, and check an action's effect
through the API (never through the page that performed it)."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from tests.support.waiting import eventually

# Buttons that exist for read-only credentials too: navigation, filters, paging, tabs.
READ_ONLY_BUTTONS = {
    "Refresh",
    "Apply filters",
    "Next page",
    "Previous page",
    "Count all",
    "Graph",
    "Mermaid text",
    "Try again",
    "Show more schedules",
    "Copy job id",
    "Copy workflow id",
    "Copy worker id",
    "Copy push endpoint id",
}


def short_id(job_id: str) -> str:
    """How the console shows a UUID in a list: its last group, the random part, after an ellipsis."""
    return "\u2026" + job_id[-12:]


async def call(
    client: aiohttp.ClientSession,
    method: str,
    path: str,
    body: Any = None,
    expect: tuple[int, ...] = (200, 201, 204),
) -> Any:
    async with client.request(method, path, json=body) as resp:
        text = await resp.text()
        assert resp.status in expect, f"{method} {path}: {resp.status} {text}"
        return json.loads(text) if text else None


async def create_job(
    client: aiohttp.ClientSession,
    task_name: str = "send",
    queue: str = "emails",
    payload: Any = None,
    **config: Any,
) -> str:
    body = {"task_name": task_name, "payload": payload or {}, "config": {"queue": queue, **config}}
    return (await call(client, "POST", "/api/v1/jobs", body))["job_id"]


async def create_jobs(
    client: aiohttp.ClientSession, count: int, queue: str, task_name: str = "send"
) -> list[str]:
    jobs = [{"task_name": task_name, "payload": {"n": n}, "config": {"queue": queue}} for n in range(count)]
    return (await call(client, "POST", "/api/v1/jobs/batch", {"jobs": jobs}))["job_ids"]


async def job(client: aiohttp.ClientSession, job_id: str) -> dict[str, Any]:
    return await call(client, "GET", f"/api/v1/jobs/{job_id}")


async def lease_one(worker: aiohttp.ClientSession, queue: str) -> tuple[str, str]:
    """Lease one job from `queue` as a remote worker: (job id, lease token)."""
    leased = await call(worker, "POST", f"/api/v1/queues/{queue}/lease", {"max_jobs": 1, "wait_secs": 10})
    assert len(leased["jobs"]) == 1, leased
    return leased["jobs"][0]["job"]["id"], leased["jobs"][0]["lease_token"]


async def complete(worker: aiohttp.ClientSession, job_id: str, token: str, result: Any = None) -> None:
    await call(
        worker, "POST", f"/api/v1/jobs/{job_id}/complete", {"lease_token": token, "result": result or {}}
    )


async def fail(worker: aiohttp.ClientSession, job_id: str, token: str, error: str) -> None:
    body = {"lease_token": token, "error": error, "retryable": False}
    await call(worker, "POST", f"/api/v1/jobs/{job_id}/fail", body)


async def failed_job(
    client: aiohttp.ClientSession, worker: aiohttp.ClientSession, queue: str, error: str = "smtp refused"
) -> str:
    """A job on `queue` that a remote worker failed for good (so it is also a dead letter)."""
    job_id = await create_job(client, queue=queue, payload={"to": "ops@example.com"})
    leased, token = await lease_one(worker, queue)
    assert leased == job_id
    await fail(worker, job_id, token, error)
    return job_id


async def dead_letters(client: aiohttp.ClientSession, **query: str) -> list[dict[str, Any]]:
    params = "&".join(f"{k}={v}" for k, v in {"limit": "100", **query}.items())
    return (await call(client, "GET", f"/api/v1/dlq?{params}"))["dead_letters"]


async def wait_for_job_status(client: aiohttp.ClientSession, job_id: str, *statuses: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        current = await job(client, job_id)
        return current if current["status"] in statuses else None

    return await eventually(reached, timeout=15, interval=0.1, message=f"job {job_id} to be {statuses}")
