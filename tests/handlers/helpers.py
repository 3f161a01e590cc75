"""Shared by the handler tests: start QueueFlow with --handlers, and talk to its REST API."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from devkit import REPO
from devkit.procs import ServiceProcess
from tests.support.waiting import eventually

TEST_TASKS = "tests.handlers.qf_handler_tasks"
EXAMPLES = REPO / "examples"
AUTH = {"Authorization": "Bearer dev"}
BUILTINS = ["echo", "fail", "log", "sleep"]
# Short drains keep teardown quick; every handler here stops when it is told to.
QUICK_STOP = ("--shutdown-grace-secs", "2")


async def start_worker(
    service: Any,
    database_url: str,
    *,
    mode: str = "all",
    modules: str = TEST_TASKS,
    extra: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> ServiceProcess:
    args = ["--handlers", modules, *QUICK_STOP, *extra] if modules else [*QUICK_STOP, *extra]
    proc: ServiceProcess = await service(database_url, mode=mode, extra_args=args, env=env)
    return proc


async def call(proc: ServiceProcess, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.request(method, proc.base_url + path, json=body, headers=AUTH) as resp,
    ):
        text = await resp.text()
        return resp.status, (await resp.json() if text else None)


async def create_job(
    proc: ServiceProcess, task_name: str, payload: dict[str, Any] | None = None, **config: Any
) -> str:
    body: dict[str, Any] = {"task_name": task_name, "payload": payload or {}}
    if config:
        body["config"] = config
    status, created = await call(proc, "POST", "/api/v1/jobs", body)
    assert status == 201, created
    return str(created["job_id"])


async def create_batch(proc: ServiceProcess, items: list[dict[str, Any]]) -> list[str]:
    status, created = await call(proc, "POST", "/api/v1/jobs/batch", {"jobs": items})
    assert status == 201, created
    return [str(i) for i in created["job_ids"]]


async def get_job(proc: ServiceProcess, job_id: str) -> dict[str, Any]:
    status, job = await call(proc, "GET", f"/api/v1/jobs/{job_id}")
    assert status == 200, job
    return dict(job)


async def wait_for_status(
    proc: ServiceProcess, job_id: str, *statuses: str, timeout: float = 20.0
) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        job = await get_job(proc, job_id)
        return job if job["status"] in statuses else None

    return await eventually(
        reached, timeout=timeout, interval=0.05, message=f"job {job_id} reaching {' or '.join(statuses)}"
    )


async def wait_for_file(path: Path, timeout: float = 20.0) -> str:
    return await eventually(
        lambda: path.exists() and (path.read_text() or "(empty)"),
        timeout=timeout,
        message=f"{path} to be written",
    )
