"""The flow-control stall of issue 37, run again and again under CPU load: three keys at concurrency
2, ten jobs on each and six that carry two keys at once (36 jobs, one batch, so they share their
timestamps); six remote worker loops, three on each of two `--mode api` processes beside a
`--mode all`, each leasing 2 with a 1 s long-poll and handling its jobs one after another.

Before migration 34 about one run in three stalled on a loaded machine: jobs pending and due,
every key's slots free, and no claim ever granting one. A run fails only when the stall is
proven, not when it is slow: when no job has finished for a while the loops are stopped, and
if jobs still wait with nothing running while a claim of the queue (rolled back) grants none of
them, that is the stall; otherwise the loops go on."""

from __future__ import annotations

import asyncio
import sys

import aiohttp
import pytest

from devkit.procs import ChildProcess

AUTH = {"Authorization": "Bearer dev"}

pytestmark = [pytest.mark.timeout(900), pytest.mark.xdist_group("processes")]

RUNS = 12
QUEUE = "stall"
QUIET_SECS = 5.0  # no job finished for this long: stop the loops and look


def batch() -> list[dict]:
    jobs = [
        {"task_name": "t", "payload": {"i": i}, "config": {"queue": QUEUE, "limits": [f"k{i % 3}"]}}
        for i in range(30)
    ]
    jobs += [
        {"task_name": "t", "payload": {"i": 30 + i}, "config": {"queue": QUEUE, "limits": ["k0", "k1"]}}
        for i in range(6)
    ]
    return jobs


async def post(http: aiohttp.ClientSession, path: str, body: dict) -> dict:
    async with http.post(path, json=body, headers=AUTH) as resp:
        assert resp.status in (200, 201, 204), f"{path}: {resp.status} {await resp.text()}"
        return await resp.json() if resp.status != 204 else {}


async def worker_loop(base_url: str, stop: asyncio.Event) -> None:
    async with aiohttp.ClientSession(base_url=base_url) as http:
        while not stop.is_set():
            leased = await post(http, f"/api/v1/queues/{QUEUE}/lease", {"max_jobs": 2, "wait_secs": 1})
            for item in leased["jobs"]:
                await asyncio.sleep(0.25)  # the handler's work
                await post(
                    http,
                    f"/api/v1/jobs/{item['job']['id']}/complete",
                    {"lease_token": item["lease_token"], "result": {}},
                )


async def proven_stall(db) -> str | None:
    """With every loop stopped: a description of the stall when jobs wait, none runs, and a claim
    grants none of them; None when a claim would take one (slow, not stalled)."""
    waiting = await db.fetch(
        "SELECT limit_keys FROM queueflow.jobs WHERE queue_name = $1 AND status IN ('pending', 'retrying')"
        " AND scheduled_at <= now()",
        QUEUE,
    )
    running = await db.fetchval(
        "SELECT count(*) FROM queueflow.jobs WHERE queue_name = $1 AND status = 'running'", QUEUE
    )
    if not waiting or running:
        return None
    tx = db.transaction()
    await tx.start()
    try:
        granted = await db.fetchval(
            "SELECT count(*) FROM queueflow.claim_limited($1, 2, 30, 0, 0, gen_random_uuid(), NULL, NULL)",
            QUEUE,
        )
    finally:
        await tx.rollback()
    if granted:
        return None
    state = await db.fetch("SELECT key, running, throttled FROM queueflow.limit_state ORDER BY key")
    return f"{len(waiting)} jobs wait ({[list(r['limit_keys']) for r in waiting]}), none runs, a claim grants none; state {[tuple(r) for r in state]}"


async def test_jobs_with_two_keys_never_stall_under_cpu_load(database_url, service, db, tmp_path):
    first = await service(database_url, mode="all")
    apis = [await service(database_url, mode="api") for _ in range(2)]
    async with aiohttp.ClientSession(base_url=first.base_url) as http:
        for key in ("k0", "k1", "k2"):
            async with http.put(f"/api/v1/limits/{key}", json={"concurrency": 2}, headers=AUTH) as resp:
                assert resp.status == 200
    # two busy processes beside the servers: the load under which the stall showed
    busy = [
        ChildProcess([sys.executable, "-c", "while True: pass"], tmp_path / f"busy-{n}.log").launch()
        for n in range(2)
    ]
    try:
        for run in range(RUNS):
            await db.execute("DELETE FROM queueflow.jobs WHERE queue_name = $1", QUEUE)
            async with aiohttp.ClientSession(base_url=first.base_url) as http:
                await post(http, "/api/v1/jobs/batch", {"jobs": batch()})
            finished, quiet = 0, 0.0
            while finished < 36:
                stop = asyncio.Event()
                loops = [asyncio.create_task(worker_loop(p.base_url, stop)) for p in apis for _ in range(3)]
                try:
                    while quiet < QUIET_SECS:
                        await asyncio.sleep(0.2)
                        now = await db.fetchval(
                            "SELECT count(*) FROM queueflow.jobs WHERE queue_name = $1 AND status = 'completed'",
                            QUEUE,
                        )
                        quiet = 0.0 if now > finished else quiet + 0.2
                        finished = now
                        if finished == 36:
                            break
                finally:
                    stop.set()
                    await asyncio.gather(*loops)
                if finished < 36:
                    stall = await proven_stall(db)
                    assert stall is None, f"run {run}: stalled: {stall}"
                    quiet = 0.0
    finally:
        for proc in busy:
            await proc.kill()
