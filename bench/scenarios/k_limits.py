"""K: flow control (docs/limits.md) against the same work without limits, in one run.

Method: a fresh database for each drain; 20,000 `echo` jobs (2,000 with --quick) enqueued before
any worker runs, as in W1.
- keys: the jobs spread over 1,000 keys (`c:0` .. `c:999`, 20 each) with one wildcard policy
  `c:*` of concurrency 5, against the same jobs without `limits`; drained in-process
  (`--mode all --workers 16`) and through remote HTTP loops (8 x max_jobs 50, api + janitor).
- hot: one key `hot` of concurrency 10 with a 100,000-job backlog of its own (10,000 with --quick),
  ten of them leased and held, then the 20,000 unlimited jobs on the same queue; their drain against
  the same drain with no backlog. The figure is the unlimited jobs' rate (DB clock).
- enqueue: 20 sequential 1,000-job batches with `limits` (1,000 keys) against the same without.
Ratios: limited / unlimited (the issue asks for at least 0.8 for the drains and 0.9 for enqueue).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from bench import client
from bench.context import Context, Scenario
from bench.harness import connect, servers, wait_for_count
from bench.report import Figure

QUEUE = "default"
KEYS = 1000
TIMEOUT_SECS = 600.0
DONE = (
    "SELECT count(*) FROM queueflow.jobs WHERE status = 'completed' AND limit_keys IS DISTINCT FROM '{hot}'"
)
WINDOW = """SELECT count(*) AS n, EXTRACT(EPOCH FROM max(completed_at) - min(started_at))::float8 AS secs
FROM queueflow.jobs WHERE status = 'completed' AND limit_keys IS DISTINCT FROM '{hot}'"""


def figures(ctx: Context) -> list[Figure]:
    out = []
    for where in ("inproc", "remote"):
        label = "in-process (--workers 16)" if where == "inproc" else "remote (8 loops x 50)"
        out += [
            Figure(f"{where}_base_jobs_per_s", f"{label}: drain without limits, DB clock", "jobs/s"),
            Figure(f"{where}_keys_jobs_per_s", f"{label}: drain over 1,000 keys of concurrency 5", "jobs/s"),
            Figure(f"{where}_keys_ratio", f"{label}: 1,000 keys / without limits", "x"),
            Figure(
                f"{where}_hot_jobs_per_s",
                f"{label}: unlimited drain beside a saturated key's backlog",
                "jobs/s",
            ),
            Figure(f"{where}_hot_ratio", f"{label}: beside the saturated backlog / without it", "x"),
        ]
    return [
        *out,
        Figure("enqueue_base_jobs_per_s", "batch enqueue (1,000 per call) without limits", "jobs/s"),
        Figure(
            "enqueue_keys_jobs_per_s", "batch enqueue (1,000 per call) with limits (1,000 keys)", "jobs/s"
        ),
        Figure("enqueue_ratio", "batch enqueue with limits / without", "x"),
    ]


def _job(i: int, shape: str) -> dict[str, Any]:
    config: dict[str, Any] = {"queue": QUEUE}
    if shape == "keys":
        config["limits"] = [f"c:{i % KEYS}"]
    elif shape == "hot":
        config["limits"] = ["hot"]
    return {"task_name": "echo", "payload": {"i": i}, "config": config}


async def _enqueue(http: aiohttp.ClientSession, base: str, total: int, shape: str) -> float:
    started = time.perf_counter()
    for start in range(0, total, 1000):
        body = {"jobs": [_job(i, shape) for i in range(start, min(total, start + 1000))]}
        async with http.post(f"{base}/api/v1/jobs/batch", json=body) as resp:
            if resp.status != 201:
                raise RuntimeError(f"batch -> {resp.status}: {await resp.text()}")
    return time.perf_counter() - started


async def _put(http: aiohttp.ClientSession, base: str, key: str, concurrency: int) -> None:
    async with http.put(f"{base}/api/v1/limits/{key}", json={"concurrency": concurrency}) as resp:
        if resp.status != 200:
            raise RuntimeError(f"PUT limit -> {resp.status}: {await resp.text()}")


async def _prepare(ctx: Context, http: aiohttp.ClientSession, base: str, shape: str, total: int) -> None:
    """The backlog of one drain: `shape` base, keys or hot."""
    if shape == "keys":
        await _put(http, base, "c:*", 5)
    if shape == "hot":
        await _put(http, base, "hot", 10)
        await _enqueue(http, base, ctx.n(100_000, 10_000), "hot")
        held = await client.lease(http, base, QUEUE, 10, 0, lease_secs=3600)  # saturate it
        if len(held) != 10:
            raise RuntimeError(f"expected to hold 10 hot jobs, got {len(held)}")
    await _enqueue(http, base, total, "keys" if shape == "keys" else "base")


async def _rate(dsn: str, total: int) -> float:
    conn = await connect(dsn)
    try:
        row = await conn.fetchrow(WINDOW)
    finally:
        await conn.close()
    if row["n"] != total:
        raise RuntimeError(f"expected {total} completed jobs, found {row['n']}")
    return total / row["secs"]


async def _analyze(dsn: str) -> None:
    conn = await connect(dsn)
    try:
        await conn.execute("ANALYZE queueflow.jobs")
    finally:
        await conn.close()


async def _drain_inprocess(ctx: Context, shape: str, run_no: int) -> float:
    total = ctx.n(20_000, 2_000)
    async with ctx.database(f"k_in_{shape}") as dsn:
        api = ctx.server(dsn, "api")
        async with servers(api), client.session() as http:
            await _prepare(ctx, http, api.base_url, shape, total)
        await _analyze(dsn)
        conn = await connect(dsn)
        try:
            async with servers(ctx.server(dsn, "all", "--workers", "16")):
                await wait_for_count(conn, DONE, total, TIMEOUT_SECS)
        finally:
            await conn.close()
        return await _rate(dsn, total)


async def _drain_remote(ctx: Context, shape: str, run_no: int) -> float:
    total = ctx.n(20_000, 2_000)
    async with ctx.database(f"k_re_{shape}") as dsn:
        api, janitor = ctx.server(dsn, "api"), ctx.server(dsn, "janitor")
        async with servers(api, janitor), client.session() as http:
            await _prepare(ctx, http, api.base_url, shape, total)
            await _analyze(dsn)
            conn = await connect(dsn)
            stop = asyncio.Event()
            loops = [
                asyncio.create_task(client.worker_loop(http, api.base_url, QUEUE, 50, 1, stop, ack="batch"))
                for _ in range(8)
            ]
            try:
                await wait_for_count(conn, DONE, total, TIMEOUT_SECS, watch=loops)
            finally:
                await client.stop_loops(loops, stop)
                await conn.close()
        return await _rate(dsn, total)


async def _enqueue_rates(ctx: Context) -> dict[str, float]:
    out = {}
    total = ctx.n(20_000, 5_000)
    for shape in ("base", "keys", "base", "keys"):  # interleaved, the better of two each
        async with ctx.database(f"k_enq_{shape}") as dsn:
            api = ctx.server(dsn, "api")
            async with servers(api), client.session() as http:
                if shape == "keys":
                    await _put(http, api.base_url, "c:*", 5)
                rate = total / await _enqueue(http, api.base_url, total, shape)
        key = f"enqueue_{shape}_jobs_per_s"
        out[key] = max(out.get(key, 0.0), rate)
    return out


async def run(ctx: Context, run_no: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for where, drain in (("inproc", _drain_inprocess), ("remote", _drain_remote)):
        for shape in ("base", "keys", "hot"):
            out[f"{where}_{shape}_jobs_per_s"] = await drain(ctx, shape, run_no)
        out[f"{where}_keys_ratio"] = out[f"{where}_keys_jobs_per_s"] / out[f"{where}_base_jobs_per_s"]
        out[f"{where}_hot_ratio"] = out[f"{where}_hot_jobs_per_s"] / out[f"{where}_base_jobs_per_s"]
    out.update(await _enqueue_rates(ctx))
    out["enqueue_ratio"] = out["enqueue_keys_jobs_per_s"] / out["enqueue_base_jobs_per_s"]
    return out


SCENARIO = Scenario(
    "K", "Flow control: limited drains and enqueue beside the same without limits", figures, run
)
