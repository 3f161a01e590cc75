"""Two API processes and two janitor processes on one database, many concurrent leasing clients:
no job is ever handed to two holders at once, and every job completes exactly once."""

from __future__ import annotations

import asyncio
import json
import random

import aiohttp
import pytest

pytestmark = pytest.mark.timeout(120)

AUTH = {"Authorization": "Bearer dev"}
JOBS = 500
LOOPS = 20


async def test_concurrent_leasing_across_processes_hands_each_job_to_one_holder(database_url, service, db):
    *apis, j1, j2 = await asyncio.gather(
        service(database_url, mode="api"),
        service(database_url, mode="api"),
        *(
            service(database_url, mode="janitor", extra_args=["--janitor-interval-secs", "0.2"])
            for _ in range(2)
        ),
    )
    janitors = [j1, j2]
    leases: list[tuple[str, str, int]] = []  # (job id, token, loop)
    completes: list[tuple[str, int]] = []
    done = asyncio.Event()

    async def producer(http: aiohttp.ClientSession) -> list[str]:
        ids: list[str] = []
        for batch in range(10):
            base = apis[batch % 2].base_url
            body = {
                "jobs": [
                    {"task_name": "work", "payload": {"b": batch, "i": i}, "config": {"queue": "busy"}}
                    for i in range(JOBS // 10)
                ]
            }
            async with http.post(f"{base}/api/v1/jobs/batch", json=body, headers=AUTH) as resp:
                assert resp.status == 201, await resp.text()
                ids += (await resp.json())["job_ids"]
            await asyncio.sleep(0)  # interleave with the leasing loops
        return ids

    async def lease_loop(http: aiohttp.ClientSession, n: int) -> None:
        rng = random.Random(n)
        while not done.is_set():
            base = apis[rng.randrange(2)].base_url
            body = {"max_jobs": rng.randint(1, 5), "lease_secs": 120, "wait_secs": 1}
            async with http.post(f"{base}/api/v1/queues/busy/lease", json=body, headers=AUTH) as resp:
                assert resp.status == 200, await resp.text()
                items = (await resp.json())["jobs"]
            for item in items:
                job_id, token = item["job"]["id"], item["lease_token"]
                leases.append((job_id, token, n))
                # Complete through either process: ownership lives in the database.
                other = apis[rng.randrange(2)].base_url
                async with http.post(
                    f"{other}/api/v1/jobs/{job_id}/complete",
                    headers=AUTH,
                    json={"lease_token": token, "result": {"token": token, "loop": n}},
                ) as resp:
                    completes.append((job_id, resp.status))
            if len(completes) >= JOBS:
                done.set()

    try:
        connector = aiohttp.TCPConnector(limit=LOOPS + 5)
        async with aiohttp.ClientSession(connector=connector) as http:
            loops = [asyncio.create_task(lease_loop(http, n)) for n in range(LOOPS)]
            ids = await producer(http)
            await asyncio.wait_for(done.wait(), 90)
            await asyncio.gather(*loops)
    finally:
        for janitor in janitors:
            await janitor.terminate(grace=10.0)

    leased_ids = [job_id for job_id, _, _ in leases]
    assert len(leased_ids) == len(set(leased_ids)) == JOBS, "a job was leased more than once"
    assert set(leased_ids) == set(ids)
    assert len({token for _, token, _ in leases}) == JOBS
    assert {status for _, status in completes} == {204}
    rows = await db.fetch("SELECT id, status, delivery_count, retry_count, result FROM queueflow.jobs")
    assert len(rows) == JOBS
    holder = {job_id: token for job_id, token, _ in leases}
    for r in rows:
        assert (r["status"], r["delivery_count"], r["retry_count"]) == ("completed", 1, 0), dict(r)
        assert json.loads(r["result"])["token"] == holder[str(r["id"])]
