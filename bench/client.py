"""The HTTP client side of the benchmarks: enqueue calls and a remote worker loop.

Bodies are encoded and decoded with msgspec (the client shares two CPU cores with the server and
PostgreSQL, so it should spend as little as it can). In --dev mode any bearer token is both a
tenant and a worker.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec

TOKEN = "bench"
HEADERS = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
_encode = msgspec.json.encode
_decode = msgspec.json.decode


def session(limit: int = 0) -> aiohttp.ClientSession:
    """One keep-alive session; `limit=0` means no cap on concurrent connections."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=limit, limit_per_host=0),
        headers=HEADERS,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=120),
    )


async def _post(http: aiohttp.ClientSession, url: str, body: Any, expect: int) -> bytes:
    async with http.post(url, data=_encode(body)) as resp:
        raw = await resp.read()
        if resp.status != expect:
            raise RuntimeError(f"POST {url} -> {resp.status}: {raw[:300]!r}")
        return raw


async def post(http: aiohttp.ClientSession, url: str, body: Any, expect: int) -> bytes:
    """POST `body` as JSON; anything but `expect` raises."""
    return await _post(http, url, body, expect)


def job_body(i: int, queue: str, task: str = "echo") -> dict[str, Any]:
    return {"task_name": task, "payload": {"i": i}, "config": {"queue": queue}}


async def create_job(http: aiohttp.ClientSession, base: str, i: int, queue: str) -> str:
    raw = await _post(http, f"{base}/api/v1/jobs", job_body(i, queue), 201)
    return str(_decode(raw)["job_id"])


async def create_batch(
    http: aiohttp.ClientSession, base: str, start: int, count: int, queue: str
) -> list[str]:
    body = {"jobs": [job_body(i, queue) for i in range(start, start + count)]}
    raw = await _post(http, f"{base}/api/v1/jobs/batch", body, 201)
    return list(_decode(raw)["job_ids"])


async def enqueue_backlog(
    http: aiohttp.ClientSession, base: str, total: int, queue: str, batch: int = 1000
) -> float:
    """`total` echo jobs in sequential batches of `batch`; returns the elapsed seconds."""
    started = time.perf_counter()
    for start in range(0, total, batch):
        await create_batch(http, base, start, min(batch, total - start), queue)
    return time.perf_counter() - started


async def lease(
    http: aiohttp.ClientSession, base: str, queue: str, max_jobs: int, wait_secs: int, lease_secs: int = 60
) -> list[dict[str, Any]]:
    raw = await _post(
        http,
        f"{base}/api/v1/queues/{queue}/lease",
        {"max_jobs": max_jobs, "lease_secs": lease_secs, "wait_secs": wait_secs},
        200,
    )
    return list(_decode(raw)["jobs"])


async def complete(http: aiohttp.ClientSession, base: str, leased: dict[str, Any]) -> None:
    await _post(
        http,
        f"{base}/api/v1/jobs/{leased['job']['id']}/complete",
        {"lease_token": leased["lease_token"], "result": {"ok": True}},
        204,
    )


async def complete_many(http: aiohttp.ClientSession, base: str, leased: list[dict[str, Any]]) -> None:
    """The batch acknowledgement (POST /api/v1/jobs/complete), every item expected to complete."""
    items = [{"id": i["job"]["id"], "lease_token": i["lease_token"], "result": {"ok": True}} for i in leased]
    raw = await _post(http, f"{base}/api/v1/jobs/complete", {"jobs": items}, 200)
    refused = [r for r in _decode(raw)["results"] if r["status"] != 204]
    if refused:
        raise RuntimeError(f"batch complete refused {len(refused)} items: {refused[:3]}")


ACKS = ("each", "sequential", "batch")


async def worker_loop(
    http: aiohttp.ClientSession,
    base: str,
    queue: str,
    max_jobs: int,
    wait_secs: int,
    stop: asyncio.Event,
    on_lease: Callable[[str, float], None] | None = None,
    ack: str = "each",
) -> int:
    """The seed's worker loop, without heartbeats (no-op jobs finish far inside the lease): lease
    up to `max_jobs`, then acknowledge them: one complete call per job, sent concurrently (`ack`
    "each"), or one after another, each answer awaited before the next job's call (`ack`
    "sequential": how a worker that handles its jobs in order runs, the seed page's and upstream's
    official clients' protocol), or one batch call for all of them (`ack` "batch"); repeat until
    `stop`. `on_lease(job_id, perf_counter)` sees every job as its lease response arrives.
    Returns the number of jobs this loop completed."""
    done = 0
    while not stop.is_set():
        jobs = await lease(http, base, queue, max_jobs, wait_secs)
        if on_lease is not None:
            now = time.perf_counter()
            for item in jobs:
                on_lease(item["job"]["id"], now)
        if jobs:
            if ack == "batch":
                await complete_many(http, base, jobs)
            elif ack == "sequential":
                for item in jobs:
                    await complete(http, base, item)
            else:
                await asyncio.gather(*(complete(http, base, item) for item in jobs))
            done += len(jobs)
    return done


async def stop_loops(tasks: list[asyncio.Task[Any]], stop: asyncio.Event, grace: float = 5.0) -> None:
    """Set `stop`, give the loops `grace` seconds to finish their current call, cancel the rest.
    An exception from a loop is re-raised (after every loop has ended)."""
    stop.set()
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=grace)
    for task in pending:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for r in results:
        if isinstance(r, Exception):
            raise r


async def has_route(http: aiohttp.ClientSession, base: str, method: str, path: str) -> bool:
    """Whether the server's OpenAPI document (/openapi.json) lists `method` on `path`."""
    async with http.get(f"{base}/openapi.json") as resp:
        if resp.status != 200:
            return False
        paths = _decode(await resp.read()).get("paths", {})
    return method.lower() in paths.get(path, {})


# --- MERGE POINT (issue 38, per-queue retention of finished jobs) ----------------------------------
# The one place the benchmark asks a server to remove each job of a queue in the statement that
# completes it (W1b with Context.drain_removing; bench.compare's "removing queue" row). Written
# before the retention branch merged, so the call is a guess at its API: PATCH /api/v1/queues/
# {queue} with {"retention": "remove_completed"}, beside pause and resume. Adjust the method, the path and the
# body below to the merged API; nothing else in the benchmark knows them.
REMOVING_QUEUE_METHOD = "PATCH"
REMOVING_QUEUE_PATH = "/api/v1/queues/{queue}"
REMOVING_QUEUE_BODY: dict[str, Any] = {"retention": "remove_completed"}


async def make_queue_remove_finished(http: aiohttp.ClientSession, base: str, queue: str) -> str | None:
    """Set `queue` to remove each job when it completes. None when the server did; the answer
    ("405 ...: body") when it has no such setting (404 or 405). Any other refusal raises."""
    url = f"{base}{REMOVING_QUEUE_PATH.format(queue=queue)}"
    async with http.request(REMOVING_QUEUE_METHOD, url, data=_encode(REMOVING_QUEUE_BODY)) as resp:
        raw = await resp.read()
        if resp.status in (404, 405):
            return f"{REMOVING_QUEUE_METHOD} {REMOVING_QUEUE_PATH} answered {resp.status}: {raw[:200]!r}"
        if not 200 <= resp.status < 300:
            raise RuntimeError(f"{REMOVING_QUEUE_METHOD} {url} -> {resp.status}: {raw[:300]!r}")
    return None
