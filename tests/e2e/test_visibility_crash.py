"""Attempts across a crash, with real processes: a remote worker SIGKILLed mid-job leaves one
`lease_expired` attempt (the janitor's reclaim writes it), and the worker that finishes the job one
`completed` attempt; each exactly once, each naming its worker, and /metrics counts both."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

WORKER = str(Path(__file__).resolve().parent / "remote_worker.py")
AUTH = {"Authorization": "Bearer dev"}


async def _worker(base_url: str, mode: str, lease_secs: str, worker_id: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        WORKER,
        base_url,
        "remote-vis",
        mode,
        lease_secs,
        worker_id,
        stdout=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL,
    )


async def _attempt_metric(url: str, outcome: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as resp:
        text = await resp.text()
    wanted = ("queueflow_job_attempts_total{", f'outcome="{outcome}"', 'task="transcode"')
    return sum(float(line.split()[-1]) for line in text.splitlines() if all(w in line for w in wanted))


async def test_a_sigkilled_remote_worker_leaves_one_lease_expired_attempt_then_one_completed(
    database_url, service, db
):
    proc = await service(database_url, mode="all", extra_args=["--janitor-interval-secs", "0.2"])
    async with aiohttp.ClientSession(base_url=proc.base_url, headers=AUTH) as http:
        async with http.post(
            "/api/v1/jobs",
            json={"task_name": "transcode", "config": {"queue": "remote-vis", "retry_delay_secs": 0}},
        ) as resp:
            assert resp.status == 201
            job_id = (await resp.json())["job_id"]

        first = await _worker(proc.base_url, "hold", "2", "doomed-worker")
        try:
            held = json.loads(await asyncio.wait_for(first.stdout.readline(), 30))
        finally:
            first.kill()  # SIGKILL mid-job
            await first.wait()
        assert held["job_id"] == job_id

        second = await _worker(proc.base_url, "work", "30", "second-worker")
        out, _ = await asyncio.wait_for(second.communicate(), 60)
        assert second.returncode == 0 and json.loads(out)["complete_status"] == 204

        async with http.get(f"/api/v1/jobs/{job_id}/attempts") as resp:
            assert resp.status == 200
            attempts = (await resp.json())["attempts"]
        assert [(a["attempt"], a["outcome"], a["worker_id"]) for a in attempts] == [
            (1, "lease_expired", "doomed-worker"),
            (2, "completed", "second-worker"),
        ]
        assert attempts[0]["error_message"].startswith("lease expired")
        assert attempts[0]["ended_at"] <= attempts[1]["started_at"]
    # One history row: the completion wrote none; the reclaim wrote exactly one.
    assert (
        await db.fetchval("SELECT count(*) FROM queueflow.job_attempts WHERE job_id = $1::uuid", job_id) == 1
    )
    # One process runs the API and the janitor: its /metrics saw both ends.
    await eventually(lambda: _attempt_metric(proc.metrics_url, "lease_expired"))
    assert await _attempt_metric(proc.metrics_url, "lease_expired") == 1
    assert await _attempt_metric(proc.metrics_url, "completed") == 1
