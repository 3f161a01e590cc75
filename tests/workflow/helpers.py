"""Helpers for the workflow tests: the workflow routes, a remote worker driven by the test (steps on
a queue no in-process worker drains), and SQL reads of jobs and steps."""

from __future__ import annotations

import json
from typing import Any

from aiohttp.test_utils import TestClient

from tests.support.api import database_of
from tests.support.waiting import eventually

DEV = {"Authorization": "Bearer dev"}
# A queue no in-process worker drains: its step jobs wait for the test's own remote worker.
MANUAL = "manual"
TERMINAL = {"completed", "failed", "partially_failed", "cancelled"}


def step(
    name: str, task: str | None = "echo", *, after: list[str] | None = None, **fields: Any
) -> dict[str, Any]:
    """A WorkflowStep body; `fields` are the other wire fields (payload, queue, when, fan_out, ...)."""
    body: dict[str, Any] = {"name": name}
    if task is not None:
        body["task_name"] = task
    if after:
        body["depends_on"] = after
    body.update(fields)
    return body


def manual(name: str, *, after: list[str] | None = None, **fields: Any) -> dict[str, Any]:
    """A step whose job the test leases and finishes itself."""
    return step(name, "remote", after=after, queue=MANUAL, **fields)


async def post(
    client: TestClient, path: str, body: Any = None, headers: dict[str, str] = DEV
) -> tuple[int, Any]:
    resp = await client.post(path, json=body, headers=headers)
    text = await resp.text()
    return resp.status, (json.loads(text) if text else None)


async def get(client: TestClient, path: str, headers: dict[str, str] = DEV) -> tuple[int, Any]:
    resp = await client.get(path, headers=headers)
    text = await resp.text()
    return resp.status, (json.loads(text) if text else None)


async def create(
    client: TestClient,
    steps: list[dict[str, Any]],
    name: str = "wf",
    headers: dict[str, str] = DEV,
    **fields: Any,
) -> str:
    status, body = await post(client, "/api/v1/workflows", {"name": name, "steps": steps, **fields}, headers)
    assert status == 201, body
    assert list(body) == ["workflow_id", "status"], (
        body
    )  # status: an extension (root steps already scheduled)
    return str(body["workflow_id"])


async def workflow(client: TestClient, wf_id: str) -> dict[str, Any]:
    status, body = await get(client, f"/api/v1/workflows/{wf_id}")
    assert status == 200, body
    return dict(body)


async def steps(client: TestClient, wf_id: str) -> dict[str, dict[str, Any]]:
    """Step states by name (the route lists them in declaration order)."""
    status, body = await get(client, f"/api/v1/workflows/{wf_id}/steps")
    assert status == 200, body
    return {s["name"]: s for s in body["steps"]}


async def wait_status(
    client: TestClient, wf_id: str, *statuses: str, timeout: float = 20.0
) -> dict[str, Any]:
    """The workflow once it is in one of `statuses` (any terminal status when none are given)."""
    wanted = set(statuses) or TERMINAL

    async def reached() -> dict[str, Any] | None:
        wf = await workflow(client, wf_id)
        if wf["status"] in TERMINAL and wf["status"] not in wanted:
            raise AssertionError(f"workflow ended {wf['status']}, wanted {sorted(wanted)}: {wf}")
        return wf if wf["status"] in wanted else None

    return await eventually(reached, timeout=timeout, interval=0.05)


async def wait_step(
    client: TestClient, wf_id: str, name: str, status: str, timeout: float = 20.0
) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        s = (await steps(client, wf_id))[name]
        return s if s["status"] == status else None

    return await eventually(
        reached, timeout=timeout, interval=0.05, message=f"step {name} of {wf_id} becomes {status}"
    )


# --- the test's remote worker ------------------------------------------------------------------------


async def lease(
    client: TestClient, queue: str = MANUAL, max_jobs: int = 1, wait_secs: int = 0, lease_secs: int = 60
) -> list[tuple[dict[str, Any], str]]:
    status, body = await post(
        client,
        f"/api/v1/queues/{queue}/lease",
        {"max_jobs": max_jobs, "wait_secs": wait_secs, "lease_secs": lease_secs},
    )
    assert status == 200, body
    return [(item["job"], item["lease_token"]) for item in body["jobs"]]


async def lease_step(
    client: TestClient, wf_id: str, step_name: str, queue: str = MANUAL, timeout: float = 20.0
) -> tuple[dict[str, Any], str]:
    """Lease the (single) job of one step; other jobs on the queue must not be leased by this."""
    await wait_step_job(client, wf_id, step_name, timeout=timeout)
    leased = await eventually(lambda: lease(client, queue), timeout=timeout, interval=0.05)
    [(job, token)] = leased
    assert (job["workflow_id"], job["workflow_step_id"]) == (wf_id, step_name), job
    return job, token


async def wait_step_job(client: TestClient, wf_id: str, step_name: str, timeout: float = 20.0) -> str:
    """The step's job id, once the step has been scheduled."""

    async def scheduled() -> str | None:
        return (await steps(client, wf_id))[step_name].get("job_id")

    return await eventually(
        scheduled, timeout=timeout, interval=0.05, message=f"step {step_name} of {wf_id} has a job"
    )


async def complete(client: TestClient, job_id: str, token: str, result: dict[str, Any] | None = None) -> None:
    status, body = await post(
        client, f"/api/v1/jobs/{job_id}/complete", {"lease_token": token, "result": result or {}}
    )
    assert status == 204, body


async def fail(
    client: TestClient, job_id: str, token: str, error: str = "boom", retryable: bool = False
) -> None:
    status, body = await post(
        client, f"/api/v1/jobs/{job_id}/fail", {"lease_token": token, "error": error, "retryable": retryable}
    )
    assert status == 204, body


async def heartbeat(client: TestClient, job_id: str, token: str) -> tuple[int, Any]:
    return await post(client, f"/api/v1/jobs/{job_id}/heartbeat", {"lease_token": token, "extend_secs": 30})


async def run_step(
    client: TestClient, wf_id: str, step_name: str, result: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Lease one step's job and complete it with `result`; returns the leased job."""
    job, token = await lease_step(client, wf_id, step_name)
    await complete(client, job["id"], token, result)
    return job


async def job(client: TestClient, job_id: str) -> dict[str, Any]:
    status, body = await get(client, f"/api/v1/jobs/{job_id}")
    assert status == 200, body
    return dict(body)


# --- SQL ---------------------------------------------------------------------------------------------


async def step_jobs(client: TestClient, wf_id: str, step_name: str | None = None) -> list[dict[str, Any]]:
    """Every job of the workflow (of one step), oldest first."""
    rows = await database_of(client).pool.fetch(
        "SELECT id::text, workflow_step_id, status, queue_name, payload, result, step_index"
        " FROM queueflow.jobs WHERE workflow_id = $1 AND ($2::text IS NULL OR workflow_step_id = $2)"
        " ORDER BY created_at, step_index NULLS FIRST, id",
        wf_id,
        step_name,
    )
    return [dict(r) for r in rows]


async def count_rows(client: TestClient, table: str) -> int:
    return int(await database_of(client).pool.fetchval(f"SELECT count(*) FROM queueflow.{table}"))


def statuses(states: dict) -> dict[str, str]:
    """{step name: status} from a steps mapping."""
    return {name: s["status"] for name, s in states.items()}


async def poison_condition(client: TestClient, wf_id: str, step_name: str) -> None:
    """Store a condition on the step nested far deeper than any request may be, so that reading
    the step raises RecursionError: an outbox event of that workflow can never be applied."""
    deep = '{"not": ' * 3000 + '{"path": "x", "op": "exists"}' + "}" * 3000
    await database_of(client).pool.execute(
        "UPDATE queueflow.workflow_steps SET definition = jsonb_set(definition, '{when}', $3::text::jsonb)"
        " WHERE workflow_id = $1 AND name = $2",
        wf_id,
        step_name,
        deep,
    )
