"""Crash safety with real processes: a remote worker killed mid-job, and a QueueFlow process killed
mid-drain. Nothing is lost and nothing completes twice."""

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


async def metric(url: str, name: str) -> float:
    async with aiohttp.ClientSession() as http, http.get(f"{url}/metrics") as resp:
        assert resp.status == 200
        for line in (await resp.text()).splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def no_other_sessions(db):
    async def check() -> bool:
        return (
            await db.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            == 0
        )

    return check


async def test_a_remote_worker_killed_mid_job_is_recovered_and_completed_exactly_once(database_url, service):
    proc = await service(database_url, mode="all", extra_args=["--janitor-interval-secs", "0.2"])
    async with aiohttp.ClientSession(base_url=proc.base_url, headers=AUTH) as http:
        async with http.post(
            "/api/v1/jobs",
            json={
                "task_name": "transcode",
                "payload": {"video": 7},
                "config": {"queue": "remote", "max_retries": 3, "retry_delay_secs": 0},
            },
        ) as resp:
            assert resp.status == 201
            job_id = (await resp.json())["job_id"]

        first = await asyncio.create_subprocess_exec(
            sys.executable,
            WORKER,
            proc.base_url,
            "remote",
            "hold",
            "2",
            stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
        try:
            held = json.loads(await asyncio.wait_for(first.stdout.readline(), 30))
        finally:
            first.kill()  # SIGKILL mid-job: no report, no heartbeat, no goodbye
            await first.wait()
        assert held["job_id"] == job_id and held["delivery_count"] == 1

        second = await asyncio.create_subprocess_exec(
            sys.executable,
            WORKER,
            proc.base_url,
            "remote",
            "work",
            "30",
            stdout=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL,
        )
        out, _ = await asyncio.wait_for(second.communicate(), 60)
        assert second.returncode == 0
        done = json.loads(out)
        assert done["job_id"] == job_id
        assert done["lease_token"] != held["lease_token"]
        assert done["complete_status"] == 204

        async with http.get(f"/api/v1/jobs/{job_id}") as resp:
            job = await resp.json()
        assert job["status"] == "completed"
        assert job["result"] == {"worker": "second"}
        assert (job["delivery_count"], job["retry_count"]) == (2, 1)

        # The first worker "comes back": every lease-guarded call is refused.
        stale = {"lease_token": held["lease_token"]}
        async with http.post(
            f"/api/v1/jobs/{job_id}/complete", json={**stale, "result": {"worker": "first"}}
        ) as r:
            assert r.status == 409
        async with http.post(f"/api/v1/jobs/{job_id}/heartbeat", json={**stale, "extend_secs": 60}) as r:
            assert r.status == 409
        async with http.post(f"/api/v1/jobs/{job_id}/fail", json={**stale, "error": "late"}) as r:
            assert r.status == 409
        async with http.get(f"/api/v1/jobs/{job_id}") as resp:
            assert (await resp.json())["result"] == {"worker": "second"}
        async with http.get("/api/v1/dlq") as resp:
            assert (await resp.json())["dead_letters"] == []
    assert await metric(proc.metrics_url, "queueflow_jobs_completed_total") == 1
    assert await metric(proc.metrics_url, "queueflow_leases_reclaimed_total") == 1


async def test_kill_9_of_an_all_process_mid_drain_loses_nothing(database_url, service, db):
    n = 40
    args = ["--workers", "4", "--janitor-interval-secs", "0.2"]
    first = await service(database_url, mode="all", extra_args=args)
    async with aiohttp.ClientSession(base_url=first.base_url, headers=AUTH) as http:
        jobs = [
            {
                "task_name": "sleep",
                "payload": {"duration": 0.25},
                "config": {"timeout": 5, "max_retries": 3, "retry_delay_secs": 0},
            }
        ] * n
        async with http.post("/api/v1/jobs/batch", json={"jobs": jobs}) as resp:
            assert resp.status == 201
            ids = set((await resp.json())["job_ids"])

    async def mid_drain() -> bool:
        counts = dict(await db.fetch("SELECT status, count(*) FROM queueflow.jobs GROUP BY status"))
        return counts.get("completed", 0) >= 8 and counts.get("running", 0) >= 1

    await eventually(mid_drain, timeout=30, interval=0.01)
    await first.kill()
    # A statement the dead process sent just before SIGKILL can still commit (a claim, say); its
    # server backends exit once they find the socket closed. Snapshot only after they are gone.
    await eventually(no_other_sessions(db), timeout=30, interval=0.01)

    running = {str(r["id"]) for r in await db.fetch("SELECT id FROM queueflow.jobs WHERE status = 'running'")}
    unfinished = await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status <> 'completed'")
    assert running and unfinished > 0
    # The dead process's in-process leases cover timeout + grace; let them run out now.
    await db.execute(
        "UPDATE queueflow.jobs SET locked_until = now() - interval '1 second' WHERE status = 'running'"
    )

    await service(database_url, mode="all", extra_args=args)

    async def drained() -> bool:
        return await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status = 'completed'") == n

    await eventually(drained, timeout=60)
    rows = await db.fetch("SELECT id, result, retry_count, delivery_count FROM queueflow.jobs")
    assert {str(r["id"]) for r in rows} == ids
    assert all(json.loads(r["result"]) == {"slept": 0.25} for r in rows)
    for r in rows:
        expected = (1, 2) if str(r["id"]) in running else (0, 1)
        assert (r["retry_count"], r["delivery_count"]) == expected, dict(r)
    assert await db.fetchval("SELECT count(*) FROM queueflow.dead_letters") == 0
