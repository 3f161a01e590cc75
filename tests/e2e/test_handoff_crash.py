"""The hand-off under SIGKILL (ADR 0018): remote workers parked in long-polls are handed the jobs
POSTed to their api process by the insert itself; the api is killed mid-stream and started again.
Jobs written leased to a call whose answer died with the process are reclaimed by the janitor
(a process of its own, as deployed) when their leases expire. Every job a POST was answered for
completes, none is lost, and no job is completed twice."""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp
import pytest

from tests.e2e.test_crash_safety import AUTH
from tests.support.metrics import gauge
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

LOOPS = 8
JOBS = 160
BURST = 16
LEASE_SECS = 2


async def test_kill_9_of_an_api_handing_jobs_to_parked_workers_loses_and_repeats_nothing(
    database_url, service, db
):
    await service(database_url, mode="janitor", extra_args=["--janitor-interval-secs", "0.2"])
    api = await service(database_url, mode="api")
    base = [api.base_url]  # the workers and the producer follow the api to its new address
    created: set[str] = set()
    completed: Counter[str] = Counter()
    stop = asyncio.Event()

    async def complete(http: aiohttp.ClientSession, job_id: str, token: str) -> None:
        """Until the api answers: a completion whose answer died with the process may have
        committed, and its replay with the same token answers 204 as the first would have."""
        while True:
            try:
                async with http.post(
                    f"{base[0]}/api/v1/jobs/{job_id}/complete", json={"lease_token": token}
                ) as resp:
                    if resp.status == 204:
                        completed[job_id] += 1
                    return
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.05)

    async def worker(http: aiohttp.ClientSession) -> None:
        body = {"max_jobs": 1, "lease_secs": LEASE_SECS, "wait_secs": 5}
        while not stop.is_set():
            try:
                async with http.post(f"{base[0]}/api/v1/queues/crash/lease", json=body) as resp:
                    leased = (await resp.json())["jobs"] if resp.status == 200 else []
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.05)  # the api is down: try again (at its new address)
                continue
            for item in leased:
                await complete(http, item["job"]["id"], item["lease_token"])

    async def post(http: aiohttp.ClientSession, n: int) -> None:
        body = {
            "task_name": "t",
            "payload": {"n": n},
            "config": {"queue": "crash", "max_retries": 5, "retry_delay_secs": 0},
        }
        try:
            async with http.post(f"{base[0]}/api/v1/jobs", json=body) as resp:
                if resp.status == 201:
                    created.add((await resp.json())["job_id"])
        except aiohttp.ClientError:
            pass  # the api died under it: the job may or may not exist

    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(headers=AUTH, timeout=timeout) as http:
        loops = [asyncio.create_task(worker(http)) for _ in range(LOOPS)]

        # Every worker parked before the first POST, so the hand-off has someone to hand to even
        # when a loaded machine is slow to start the loops.
        async def all_parked() -> bool:
            return await gauge(http, api, "queueflow_long_poll_waiters") >= LOOPS

        await eventually(all_parked, timeout=30)
        posts = []
        for n in range(JOBS):
            if n == JOBS // 2:
                # A burst, and the kill while it is under way: hand-offs written and not yet
                # answered, answers in transit, POSTs never answered.
                posts.extend(asyncio.create_task(post(http, JOBS + k)) for k in range(BURST))
                await asyncio.sleep(0.002)
                await api.kill()
                api = await service(database_url, mode="api")
                base[0] = api.base_url
            posts.append(asyncio.create_task(post(http, n)))
            await asyncio.sleep(0.005)
        await asyncio.gather(*posts)

        async def all_done() -> bool:
            left = await db.fetchval("SELECT count(*) FROM queueflow.jobs WHERE status <> 'completed'")
            return left == 0 and set(completed) >= created

        await eventually(all_done, timeout=60, interval=0.1)
        stop.set()
        await asyncio.wait(loops, timeout=10)
        for loop in loops:
            loop.cancel()

    rows = await db.fetch("SELECT id, status, started_at = created_at AS handed FROM queueflow.jobs")
    stored = {str(r["id"]) for r in rows}
    assert created <= stored  # every job a POST was answered for exists ...
    assert all(r["status"] == "completed" for r in rows)  # ... and every stored job completed
    assert set(completed) == stored and max(completed.values()) == 1  # once each
    assert sum(r["handed"] for r in rows) > 0  # the hand-off was exercised
    assert await db.fetchval("SELECT count(*) FROM queueflow.dead_letters") == 0
